"""The Helm chart, rendered by Helm's own engine (helm-python-sdk) and checked against the Kubernetes schemas.

Runs offline: no cluster, no helm binary. Custom resources (ServiceMonitor, PodMonitor, PrometheusRule) are not in
kubernetes-validate's schemas, so they are checked structurally.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from helm_python import _native

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "ajet-runner"
KUBE_VERSION = "1.30.0"
RELEASE = "rel"
NAMESPACE = "ml"
OPERATOR_API = "monitoring.coreos.com/v1"
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}

Manifest = dict[str, Any]

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "external-redis-url": {"redis": {"bundled": False, "external": {"url": "redis://redis.infra:6379/3"}}},
    "external-redis-secret": {
        "redis": {"bundled": False, "external": {"existingSecret": "my-redis", "existingSecretKey": "url"}},
        "auth": {"existingSecret": "my-token", "existingSecretTokenKey": "api-token"},
    },
    "operator-forced": {
        "metrics": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
            "podMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
        }
    },
    "no-monitoring": {
        "metrics": {
            "serviceMonitor": {"enabled": False},
            "podMonitor": {"enabled": False},
            "prometheusRule": {"enabled": False},
            "grafanaDashboard": {"enabled": False},
        }
    },
    "ingress-tls": {
        "ingress": {"enabled": True, "className": "nginx", "hostname": "runner.example.org", "tls": True},
        "api": {"replicaCount": 2},
    },
    "pvc-storage": {"storage": {"type": "pvc", "mountPath": "/mnt/shared", "pvc": {"storageClass": "cpfs"}}},
    "pvc-existing-claim": {"storage": {"type": "pvc", "pvc": {"existingClaim": "team-data"}}},
    "no-storage": {"storage": {"type": "none"}, "config": {"allowedRoots": ["/data/a", "/data/b"]}},
    "gpu-resource": {"worker": {"gpus": {"mode": "resource", "count": 4, "perNode": 4}, "slots": 2}},
    "tmux-on-host": {"worker": {"tmux": {"runOnHost": True, "hostUid": 1234, "hostGid": 1234}}},
    "rolling-hostnetwork": {
        "worker": {
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "hostNetwork": True,
            "drainOnStop": False,
            "extraEnv": [{"name": "SWANLAB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        },
        "config": {"extraEnv": {"AJET_RUNNER_PLATEAU_EVALUATIONS": 6}},
    },
    "redis-sentinel": {"redis": {"sentinel": {"enabled": True}}},
    "redis-sentinel-ephemeral-noauth": {
        "redis": {"sentinel": {"enabled": True, "replicas": 5, "quorum": 3, "podDisruptionBudget": False},
                  "auth": {"enabled": False}, "persistence": {"enabled": False}},
    },
    "redis-ephemeral-noauth": {
        "redis": {"auth": {"enabled": False}, "persistence": {"enabled": False}},
        "networkPolicy": {"enabled": False},
    },
}


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


def parse(manifests: dict[str, str]) -> list[Manifest]:
    docs: list[Manifest] = []
    for path, text in manifests.items():
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return docs


def render(chart: helm.Chart, values: dict[str, Any]) -> list[Manifest]:
    """`helm template` with Helm's default capabilities (no Prometheus operator API)."""
    return parse(chart.render(values, name=RELEASE, namespace=NAMESPACE))


def render_with_api_versions(chart: helm.Chart, values: dict[str, Any], api_versions: list[str]) -> list[Manifest]:
    """`helm install --dry-run=client --api-versions ...`: the engine then sees extra cluster APIs.

    helm-python-sdk's Config.install() does not forward `api_versions` (libhelm_c accepts it), so the native
    call is made directly with the same argument order as Config.install().
    """
    with helm.Config(namespace=NAMESPACE, storage_driver="memory") as cfg:
        payload = _native.call_string(
            "helm_install",
            cfg._raw(),
            _native.HANDLE(0),
            chart._raw(),
            None,
            RELEASE,
            json.dumps(values),
            json.dumps({"dry_run": "client", "api_versions": api_versions, "kube_version": f"v{KUBE_VERSION}"}),
        )
    manifest = json.loads(payload)["manifest"]
    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def by_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Manifest], kind: str, name_suffix: str = "") -> Manifest:
    found = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(pod_owner: Manifest, name: str) -> Manifest:
    spec = pod_owner["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name)


def env_of(c: Manifest) -> dict[str, Manifest]:
    return {e["name"]: e for e in c.get("env", [])}


def check_operator_object(doc: Manifest) -> None:
    """Structural check of a prometheus-operator custom resource (no schema for CRDs offline)."""
    assert doc["apiVersion"] == OPERATOR_API
    assert doc["metadata"]["name"] and doc["metadata"]["namespace"]
    spec = doc["spec"]
    if doc["kind"] == "ServiceMonitor":
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "api"
        assert [e["port"] for e in spec["endpoints"]] == ["http"]
        assert spec["endpoints"][0]["path"] == "/metrics"
    elif doc["kind"] == "PodMonitor":
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "worker"
        assert [e["port"] for e in spec["podMetricsEndpoints"]] == ["metrics"]
    else:
        groups = spec["groups"]
        assert groups and all(g["name"] and g["rules"] for g in groups)
        for rule in (r for g in groups for r in g["rules"]):
            assert set(rule) >= {"alert", "expr", "for", "labels", "annotations"}


@pytest.mark.parametrize("case", sorted(VALUE_SETS))
def test_every_manifest_is_valid_kubernetes(chart: helm.Chart, case: str) -> None:
    docs = render(chart, VALUE_SETS[case])
    assert docs
    for doc in docs:
        where = f"{case}: {doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in OPERATOR_KINDS:
            check_operator_object(doc)
            continue
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{where}: {err.message} at {list(err.path)}")
        assert doc["metadata"]["namespace"] == NAMESPACE, where
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == RELEASE, where
        assert labels["app.kubernetes.io/managed-by"] == "Helm", where


def test_validator_rejects_a_broken_manifest(chart: helm.Chart) -> None:
    """The validation above can fail: a typo in a pod spec is caught in strict mode."""
    deployment = one(render(chart, {}), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("case", sorted(VALUE_SETS))
def test_lint_is_clean(case: str) -> None:
    report = helm.lint(CHART_DIR, VALUE_SETS[case], strict=True, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


def test_lint_reports_problems() -> None:
    """The lint check can fail: values the schema rejects are lint errors."""
    report = helm.lint(CHART_DIR, {"api": {"replicaCount": "two"}}, strict=True, namespace=NAMESPACE)
    assert [m for m in report["messages"] if m["severity"] == 3]


def test_default_release_has_all_parts(chart: helm.Chart) -> None:
    kinds = sorted(d["kind"] for d in render(chart, {}))
    assert kinds == sorted(
        [
            "ConfigMap",  # Grafana dashboard
            "DaemonSet",  # workers
            "DaemonSet",  # session hosts
            "Deployment",
            "NetworkPolicy",
            "Secret",
            "Service",  # API
            "Service",  # Redis (headless)
            "ServiceAccount",
            "StatefulSet",
        ]
    )


def test_worker_daemonset_contract(chart: helm.Chart) -> None:
    docs = render(chart, {})
    ds = one(docs, "DaemonSet", "-worker")
    pod = ds["spec"]["template"]["spec"]
    worker = container(ds, "worker")
    env = env_of(worker)

    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["AJET_RUNNER_NODE"]["value"] == "$(NODE_NAME)"
    assert worker["args"][:3] == ["worker", "--node", "$(NODE_NAME)"]
    assert worker["args"][3:5] == ["--metrics-port", "9101"]
    assert worker["ports"] == [{"name": "metrics", "containerPort": 9101, "protocol": "TCP"}]
    # the worker listens on loopback unless told: the pod's probes and Prometheus come to its IP
    assert env["AJET_RUNNER_METRICS_HOST"]["value"] == "0.0.0.0"
    assert worker["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}

    pre_stop = worker["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[-1] == 'exec ajet-runner drain --node "$NODE_NAME" --reason preStop'
    assert "--sticky" not in pre_stop[-1]  # the node's next worker takes work again
    assert pod["terminationGracePeriodSeconds"] >= 300

    tmux_volume = next(v for v in pod["volumes"] if v["name"] == "tmux")
    assert tmux_volume["hostPath"] == {"path": "/var/run/ajet-runner/tmux", "type": "DirectoryOrCreate"}
    assert env["AJET_RUNNER_TMUX_SOCKET"]["value"] == "/var/run/ajet-runner/tmux/tmux.sock"
    assert {"name": "tmux", "mountPath": "/var/run/ajet-runner/tmux"} in worker["volumeMounts"]
    init = container(ds, "tmux-dir")
    assert "chown 1000:1000 /var/run/ajet-runner/tmux" in init["args"][0]

    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["hostPath"]["path"] == "/mnt/data_cpfs"
    assert {"name": "data", "mountPath": "/mnt/data_cpfs"} in worker["volumeMounts"]
    assert env["AJET_RUNNER_ALLOWED_ROOTS"]["value"] == "/mnt/data_cpfs"

    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["runtimeClassName"] == "nvidia"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "AJET_RUNNER_GPUS" not in env and "AJET_RUNNER_SLOTS" not in env
    assert pod["securityContext"]["runAsUser"] == 1000
    assert "hostPID" not in pod


def test_gpus_as_device_plugin_resources(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["gpu-resource"])
    ds = one(docs, "DaemonSet", "-worker")
    worker = container(ds, "worker")
    # The experiments run in the session host: it gets the GPUs, the worker only counts them.
    host = container(one(docs, "DaemonSet", "-session-host"), "session-host")
    assert host["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert "nvidia.com/gpu" not in worker.get("resources", {}).get("limits", {})
    assert env_of(worker)["AJET_RUNNER_GPUS"]["value"] == "4"
    assert env_of(worker)["AJET_RUNNER_SLOTS"]["value"] == "2"
    assert "runtimeClassName" not in ds["spec"]["template"]["spec"]
    assert "NVIDIA_VISIBLE_DEVICES" not in env_of(worker)

    without_host = one(render(chart, {**VALUE_SETS["gpu-resource"], "sessionHost": {"enabled": False}}),
                       "DaemonSet")
    assert container(without_host, "worker")["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_session_host_daemonset_shares_the_socket_not_the_pid_namespace(chart: helm.Chart) -> None:
    docs = render(chart, {})
    host_ds = one(docs, "DaemonSet", "-session-host")
    worker_ds = one(docs, "DaemonSet", "-worker")
    assert host_ds["spec"]["updateStrategy"] == {"type": "OnDelete"}
    host, worker = container(host_ds, "session-host"), container(worker_ds, "worker")
    sock = "/var/run/ajet-runner/tmux/tmux.sock"
    assert host["args"] == ["session-host", "--socket", sock]
    assert env_of(worker)["AJET_RUNNER_TMUX_SOCKET"]["value"] == sock
    assert env_of(worker)["AJET_RUNNER_SESSION_HOST"]["value"] == "remote"
    for ds, c in ((host_ds, host), (worker_ds, worker)):
        pod = ds["spec"]["template"]["spec"]
        assert "hostPID" not in pod and "shareProcessNamespace" not in pod
        volume = next(v for v in pod["volumes"] if v["name"] == "tmux")
        assert volume["hostPath"] == {"path": "/var/run/ajet-runner/tmux", "type": "DirectoryOrCreate"}
        assert {"name": "tmux", "mountPath": "/var/run/ajet-runner/tmux"} in c["volumeMounts"]
        assert {"name": "data", "mountPath": "/mnt/data_cpfs"} in c["volumeMounts"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert pod["securityContext"]["runAsUser"] == 1000
    assert host_ds["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    assert "preStop" not in str(host)  # nothing drains or stops the runs when this pod goes

    off = render(chart, {"sessionHost": {"enabled": False}})
    assert [d["metadata"]["name"] for d in by_kind(off, "DaemonSet")] == ["rel-ajet-runner-worker"]
    assert "AJET_RUNNER_SESSION_HOST" not in env_of(container(one(off, "DaemonSet", "-worker"), "worker"))


def test_schema_refuses_tmux_on_host_with_pvc_storage(chart: helm.Chart) -> None:
    with pytest.raises(Exception, match="(?i)hostPath|storage"):
        chart.render({"worker": {"tmux": {"runOnHost": True}}, "storage": {"type": "pvc"}},
                     name=RELEASE, namespace=NAMESPACE)
    assert render(chart, {"worker": {"tmux": {"runOnHost": True}}, "storage": {"type": "hostPath"}})


def test_tmux_on_host_mode(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["tmux-on-host"])
    ds = one(docs, "DaemonSet", "-worker")  # no session host: the host's own tmux plays that part
    pod = ds["spec"]["template"]["spec"]
    worker = container(ds, "worker")
    assert pod["hostPID"] is True
    assert worker["securityContext"]["privileged"] is True
    assert env_of(worker)["PATH"]["value"].startswith("/opt/ajet-runner/host-bin:")
    wrapper = one(docs, "ConfigMap", "-worker-hostbin")["data"]["tmux"]
    assert "nsenter --target 1" in wrapper and "--setuid 1234" in wrapper and 'tmux "$@"' in wrapper
    assert "chown 1234:1234" in container(ds, "tmux-dir")["args"][0]


def test_network_policy_admits_only_api_and_workers_to_redis(chart: helm.Chart) -> None:
    docs = render(chart, {})
    policy = one(docs, "NetworkPolicy")
    redis_pod_labels = one(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= redis_pod_labels.items()
    assert selector["app.kubernetes.io/component"] == "redis"

    allowed = [peer["podSelector"]["matchLabels"] for peer in policy["spec"]["ingress"][0]["from"]]
    for owner in (one(docs, "Deployment"), one(docs, "DaemonSet", "-worker")):
        pod_labels = owner["spec"]["template"]["metadata"]["labels"]
        assert any(sel.items() <= pod_labels.items() for sel in allowed), owner["metadata"]["name"]
    assert not any(sel.items() <= redis_pod_labels.items() for sel in allowed)
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 6379, "protocol": "TCP"}]


def test_secrets_are_referenced_not_inlined(chart: helm.Chart) -> None:
    token, password = "tok-3f9a1c2b7e", "pw0123456789abcdef"
    manifests = chart.render(
        {"auth": {"token": token}, "redis": {"auth": {"password": password}}}, name=RELEASE, namespace=NAMESPACE
    )
    docs = parse(manifests)
    secret = one(docs, "Secret")
    assert base64.b64decode(secret["data"]["token"]).decode() == token
    assert base64.b64decode(secret["data"]["redis-password"]).decode() == password
    for path, text in manifests.items():
        if not path.endswith("secret.yaml"):
            assert token not in text and password not in text, path

    api = container(one(docs, "Deployment"), "api")
    ref = env_of(api)["AJET_RUNNER_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "token"}
    redis_ref = env_of(api)["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert redis_ref == {"name": secret["metadata"]["name"], "key": "redis-password"}
    assert (
        env_of(api)["REDIS_URL"]["value"]
        == f"redis://:$(REDIS_PASSWORD)@{RELEASE}-ajet-runner-redis.{NAMESPACE}.svc.cluster.local:6379/0"
    )
    assert "--requirepass" in container(one(docs, "StatefulSet"), "redis")["args"][0]


def test_generated_token_when_none_given(chart: helm.Chart) -> None:
    secret = one(render(chart, {}), "Secret")
    assert len(base64.b64decode(secret["data"]["token"])) == 40


def test_existing_secrets(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["external-redis-secret"])
    assert not by_kind(docs, "Secret")
    env = env_of(container(one(docs, "Deployment"), "api"))
    assert env["AJET_RUNNER_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "my-token", "key": "api-token"}
    assert env["REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "my-redis", "key": "url"}


def test_external_redis(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["external-redis-url"])
    assert not by_kind(docs, "StatefulSet") and not by_kind(docs, "NetworkPolicy")
    assert [d["metadata"]["name"] for d in by_kind(docs, "Service")] == [f"{RELEASE}-ajet-runner"]
    secret = one(docs, "Secret")
    assert base64.b64decode(secret["data"]["redis-url"]).decode() == "redis://redis.infra:6379/3"
    for owner in (one(docs, "Deployment"), one(docs, "DaemonSet", "-worker")):
        main = owner["spec"]["template"]["spec"]["containers"][0]
        ref = env_of(main)["REDIS_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": secret["metadata"]["name"], "key": "redis-url"}
        assert "REDIS_PASSWORD" not in env_of(main)


def test_external_redis_without_address_fails(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError, match="redis.external.url"):
        chart.render({"redis": {"bundled": False}}, name=RELEASE, namespace=NAMESPACE)


def test_bundled_redis_statefulset(chart: helm.Chart) -> None:
    docs = render(chart, {})
    sts = one(docs, "StatefulSet")
    svc = one(docs, "Service", "-redis")
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == svc["metadata"]["name"]
    assert sts["spec"]["replicas"] == 1
    redis = container(sts, "redis")
    assert redis["image"] == "docker.io/library/redis:7.4.2"  # pinned, never a floating tag
    assert "--appendonly yes" in redis["args"][0] and "--maxmemory-policy noeviction" in redis["args"][0]
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"

    ephemeral = one(render(chart, VALUE_SETS["redis-ephemeral-noauth"]), "StatefulSet")
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    assert "--requirepass" not in container(ephemeral, "redis")["args"][0]


def test_pvc_storage(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["pvc-storage"])
    claim = one(docs, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "cpfs"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    for owner in (one(docs, "Deployment"), *by_kind(docs, "DaemonSet")):
        volumes = {v["name"]: v for v in owner["spec"]["template"]["spec"]["volumes"]}
        assert volumes["data"] == {"name": "data", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}}
        mounts = owner["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "data", "mountPath": "/mnt/shared"} in mounts

    existing = render(chart, VALUE_SETS["pvc-existing-claim"])
    assert not by_kind(existing, "PersistentVolumeClaim")
    volumes = one(existing, "DaemonSet", "-worker")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "team-data"}} in volumes


def test_no_storage_uses_allowed_roots(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["no-storage"])
    ds = one(docs, "DaemonSet", "-worker")
    assert all(v["name"] != "data" for v in ds["spec"]["template"]["spec"]["volumes"])
    assert env_of(container(ds, "worker"))["AJET_RUNNER_ALLOWED_ROOTS"]["value"] == "/data/a:/data/b"


def test_ingress(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["ingress-tls"])
    ingress = one(docs, "Ingress")
    assert ingress["apiVersion"] == "networking.k8s.io/v1"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": one(docs, "Service", "-ajet-runner")["metadata"]["name"], "port": {"name": "http"}}
    assert ingress["spec"]["tls"] == [{"hosts": ["runner.example.org"], "secretName": "runner.example.org-tls"}]
    assert one(docs, "Deployment")["spec"]["replicas"] == 2
    assert not by_kind(render(chart, {}), "Ingress")


def test_monitoring_objects_follow_the_operator_api(chart: helm.Chart) -> None:
    # "auto" without the operator's API (helm template's default capabilities): none.
    assert not [d for d in render(chart, {}) if d["kind"] in OPERATOR_KINDS]

    # "auto" with the API present: all three, valid.
    with_api = render_with_api_versions(chart, {}, [OPERATOR_API])
    present = [d for d in with_api if d["kind"] in OPERATOR_KINDS]
    assert sorted(d["kind"] for d in present) == sorted(OPERATOR_KINDS)
    for doc in present:
        check_operator_object(doc)

    # Disabled explicitly: none even with the API.
    disabled = render_with_api_versions(chart, VALUE_SETS["no-monitoring"], [OPERATOR_API])
    assert not [d for d in disabled if d["kind"] in OPERATOR_KINDS | {"ConfigMap"}]

    # Forced on (GitOps `helm template` without --api-versions): all three, with the extra labels.
    forced = render(chart, VALUE_SETS["operator-forced"])
    assert one(forced, "ServiceMonitor")["metadata"]["labels"]["release"] == "prom"
    assert one(forced, "PrometheusRule")["metadata"]["labels"]["release"] == "prom"
    one(forced, "PodMonitor")


def test_prometheus_rule_embeds_the_standalone_rules_file(chart: helm.Chart) -> None:
    rule = one(render(chart, VALUE_SETS["operator-forced"]), "PrometheusRule")
    text = (CHART_DIR / "alerts" / "ajet-runner-rules.yaml").read_text()
    assert text.count('up{job="ajet-runner"}') == 2  # AjetRunnerApiDown: the API's job, standalone
    api_job = f'job="{RELEASE}-ajet-runner", namespace="{NAMESPACE}"'
    standalone = yaml.safe_load(text.replace('job="ajet-runner"', api_job))
    assert rule["spec"]["groups"] == standalone["groups"]
    service = one(render(chart, VALUE_SETS["operator-forced"]), "Service", f"{RELEASE}-ajet-runner")
    assert service["metadata"]["namespace"] == NAMESPACE  # the ServiceMonitor's job label is this Service's name


def test_dashboard_configmap_for_the_grafana_sidecar(chart: helm.Chart) -> None:
    cm = one(render(chart, {}), "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART_DIR / "dashboards" / "ajet-runner.json").read_text())
    assert json.loads(cm["data"]["ajet-runner.json"]) == shipped


def test_settings_env_reaches_both_programs(chart: helm.Chart) -> None:
    docs = render(chart, VALUE_SETS["rolling-hostnetwork"])
    ds = one(docs, "DaemonSet", "-worker")
    worker, api = container(ds, "worker"), container(one(docs, "Deployment"), "api")
    for c in (worker, api):
        assert env_of(c)["AJET_RUNNER_PLATEAU_EVALUATIONS"]["value"] == "6"
        assert env_of(c)["AJET_RUNNER_STALL_SECONDS"]["value"] == "1800"
    assert "SWANLAB_API_KEY" in env_of(worker)
    assert "lifecycle" not in worker
    assert ds["spec"]["template"]["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"


@pytest.mark.parametrize(
    "bad",
    [
        {"api": {"replicaCount": "two"}},
        {"api": {"replicasCount": 2}},
        {"worker": {"gpus": {"mode": "all"}}},
        {"worker": {"terminationGracePeriodSeconds": -1}},
        {"storage": {"type": "nfs"}},
        {"storage": {"mountPath": "relative/path"}},
        {"metrics": {"serviceMonitor": {"enabled": "maybe"}}},
        {"redis": {"external": {"url": "http://not-redis"}}},
        {"redis": {"auth": {"password": "has spaces and @"}}},
        {"unknownTopLevel": True},
    ],
)
def test_schema_rejects_bad_values(chart: helm.Chart, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)
    with pytest.raises(helm.HelmValuesError):
        chart.render(bad, name=RELEASE, namespace=NAMESPACE)


def test_schema_accepts_every_value_set(chart: helm.Chart) -> None:
    for values in VALUE_SETS.values():
        chart.validate_schema(values)


def test_values_yaml_documents_every_key() -> None:
    """Bitnami convention: every leaf in values.yaml has a `## @param <path>` line."""
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    documented = {
        line.split()[2] for line in (CHART_DIR / "values.yaml").read_text().splitlines() if "## @param " in line
    }

    def leaves(node: Any, prefix: str) -> Iterator[str]:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                path = f"{prefix}.{key}" if prefix else key
                if key in {"requests", "limits", "httpGet", "capabilities", "seccompProfile"}:
                    continue
                yield from leaves(value, path)
        else:
            yield prefix

    missing = [
        path for path in leaves(values, "") if not any(path == d or path.startswith(d + ".") for d in documented)
    ]
    assert not missing, missing


def readme_helm_commands(readme: Path) -> list[list[str]]:
    """Every `helm install|upgrade|template` command in a README's bash blocks, as argument lists."""
    import re
    import shlex

    commands = []
    for block in re.findall(r"```bash\n(.*?)```", readme.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] in (["helm", "install"], ["helm", "upgrade"], ["helm", "template"]):
                commands.append(words)
    return commands


def set_values(words: list[str]) -> dict[str, Any]:
    """The values the `--set a.b=c` flags of one command line give (strings, as helm --set-string would
    keep them; numbers are converted like helm does for the few numeric keys used here)."""
    values: dict[str, Any] = {}
    for flag, arg in zip(words, words[1:], strict=False):
        if flag != "--set":
            continue
        for pair in arg.split(","):
            key, value = pair.split("=", 1)
            node = values
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = int(value) if value.isdigit() else {"true": True, "false": False}.get(value, value)
    return values


@pytest.mark.parametrize("readme", ["README.md", "helm/ajet-runner/README.md"])
def test_the_readmes_helm_commands_render_the_image_they_promise(chart: helm.Chart, readme: str) -> None:
    commands = readme_helm_commands(CHART_DIR.parents[1] / readme)
    assert commands, f"no helm command found in {readme}"
    for words in commands:
        values = set_values(words)
        docs = render(chart, values)
        image = values.get("image", {})
        assert "<" not in " ".join(words), f"a placeholder is not a value one can paste: {' '.join(words)}"
        registry, repo = image.get("registry", "ghcr.io"), image["repository"]
        names_registry = "." in repo.split("/")[0] or ":" in repo.split("/")[0]
        expected = f"{repo if names_registry else f'{registry}/{repo}'}:{image.get('tag', '0.1.0')}"
        for owner in (one(docs, "Deployment"), one(docs, "DaemonSet", "-worker")):
            assert owner["spec"]["template"]["spec"]["containers"][0]["image"] == expected, " ".join(words)


@pytest.mark.parametrize(("image", "expected"), [
    ({}, "ghcr.io/ajet-runner/ajet-runner:0.1.0"),
    ({"repository": "myreg.io/ajet-runner"}, "myreg.io/ajet-runner:0.1.0"),
    ({"repository": "localhost:5000/ajet-runner", "tag": "dev"}, "localhost:5000/ajet-runner:dev"),
    ({"registry": "myreg.io", "repository": "team/ajet-runner"}, "myreg.io/team/ajet-runner:0.1.0"),
    ({"registry": "", "repository": "ajet-runner"}, "ajet-runner:0.1.0"),
    ({"digest": "sha256:" + "a" * 64}, "ghcr.io/ajet-runner/ajet-runner@sha256:" + "a" * 64),
])
def test_image_registry_and_repository_compose(chart: helm.Chart, image: dict[str, str], expected: str) -> None:
    api = one(render(chart, {"image": image}), "Deployment")
    assert api["spec"]["template"]["spec"]["containers"][0]["image"] == expected


def test_service_monitor_can_send_the_token_from_the_secret(chart: helm.Chart) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True, "sendToken": True}}}
    monitor = one(render(chart, values), "ServiceMonitor")
    auth = monitor["spec"]["endpoints"][0]["authorization"]
    assert auth == {"type": "Bearer", "credentials": {"name": "rel-ajet-runner", "key": "token"}}
    existing = one(render(chart, {**values, "auth": {"existingSecret": "tok", "existingSecretTokenKey": "k"}}),
                   "ServiceMonitor")
    assert existing["spec"]["endpoints"][0]["authorization"]["credentials"] == {"name": "tok", "key": "k"}
    plain = one(render(chart, {"metrics": {"serviceMonitor": {"enabled": True}}}), "ServiceMonitor")
    assert "authorization" not in plain["spec"]["endpoints"][0]


def _notes(chart: helm.Chart, values: dict[str, Any]) -> str:
    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return " ".join(next(text for path, text in rendered.items() if path.endswith("NOTES.txt")).split())


def test_notes_say_what_a_worker_restart_does_to_the_runs(chart: helm.Chart) -> None:
    default = _notes(chart, {})
    assert "session host" in default and "leaves them running" in default and "ends the experiments it" not in default
    inside = _notes(chart, {"sessionHost": {"enabled": False}})
    assert "restarting a worker pod ends the experiments it was running" in inside
    assert "when its node is idle" in inside
    on_host = _notes(chart, {"worker": {"tmux": {"runOnHost": True}}, "storage": {"type": "hostPath"}})
    assert "host's tmux server" in on_host and "ends the experiments" not in on_host


def test_redis_with_sentinel(chart: helm.Chart) -> None:
    """redis.sentinel.enabled: a master and replicas with a sentinel each, and the runner's pods given the
    sentinels and the master's name (never REDIS_URL); valid on the oldest and newest Kubernetes we support."""
    docs = render(chart, VALUE_SETS["redis-sentinel"])
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    assert [c["name"] for c in sts["spec"]["template"]["spec"]["containers"]] == ["redis", "sentinel"]
    redis, sentinel = container(sts, "redis"), container(sts, "sentinel")
    assert redis["command"] == ["/bin/sh", "/scripts/redis.sh"] and sentinel["command"][-1] == "/scripts/sentinel.sh"
    assert env_of(sentinel)["QUORUM"]["value"] == "2" and env_of(redis)["REDISCLI_AUTH"]["valueFrom"]
    scripts = one(docs, "ConfigMap", "-redis-scripts")["data"]
    assert "sentinel monitor $MASTER_NAME $master 6379 $QUORUM" in scripts["sentinel.sh"]
    assert "--replicaof \"$master\" 6379" in scripts["redis.sh"]
    svc = one(docs, "Service", "-redis")
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in svc["spec"]["ports"]] == [6379, 26379]
    host = f"{RELEASE}-ajet-runner-redis.{NAMESPACE}.svc.cluster.local"
    members = ",".join(f"{RELEASE}-ajet-runner-redis-{i}.{host}:26379" for i in range(3))
    for owner in (one(docs, "Deployment"), one(docs, "DaemonSet", "-worker")):
        env = env_of(owner["spec"]["template"]["spec"]["containers"][0])
        assert env["AJET_RUNNER_REDIS_SENTINELS"]["value"] == members
        assert env["AJET_RUNNER_REDIS_MASTER"]["value"] == "ajet"
        assert env["AJET_RUNNER_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "redis-password"
        assert "REDIS_URL" not in env and "REDIS_PASSWORD" not in env
    policy = one(docs, "NetworkPolicy")
    assert [[p["port"] for p in rule["ports"]] for rule in policy["spec"]["ingress"]] == [[6379, 26379], [6379, 26379]]
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    for version in ("1.25.0", "1.33.0"):
        for doc in docs:
            if doc["kind"] not in OPERATOR_KINDS:
                kubernetes_validate.validate(doc, version, strict=True)


def test_sentinel_needs_the_bundled_redis_and_a_reachable_quorum(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError, match="needs redis.bundled=true"):
        chart.render({"redis": {"bundled": False, "external": {"url": "redis://r:6379/0"},
                                "sentinel": {"enabled": True}}}, name=RELEASE, namespace=NAMESPACE)
    with pytest.raises(helm.HelmRenderError, match="quorum cannot be more than"):
        chart.render({"redis": {"sentinel": {"enabled": True, "quorum": 4}}}, name=RELEASE, namespace=NAMESPACE)


def test_sentinel_start_scripts_are_valid_sh(chart: helm.Chart, tmp_path: Path) -> None:
    """The scripts the Redis pods run parse as POSIX sh (`sh -n`); they run in the official redis image."""
    import subprocess

    scripts = one(render(chart, VALUE_SETS["redis-sentinel"]), "ConfigMap", "-redis-scripts")["data"]
    for name, text in scripts.items():
        path = tmp_path / name
        path.write_text(text)
        checked = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"
