"""Red team, fast: the secret forms that passed the redactor in the last round (issue 37 item 6), their family,
and ordinary log lines that must stay readable. statemachine/failures/redact.py is what the adviser's prompt and the
webhook payloads go through."""

from __future__ import annotations

import pytest

from ajet_runner.statemachine.failures.redact import REDACTED, Redactor
from tests.redteam.record import record

# (a line as a log, a shell history or a YAML holds it; the secret in it)
SECRET_FORMS: list[tuple[str, str]] = [
    # -pPASSWORD, attached
    ("mysql -h db -u root -pHunter2Pass! mydb", "Hunter2Pass!"),
    ("mysqldump -uadmin -p'S3cret pass' db > x.sql", "S3cret pass"),
    ("mariadb -u app -pMaria-pw-881 -e 'select 1'", "Maria-pw-881"),
    ("sshpass -pSshPass-4411 ssh root@10.0.0.5 -p 8824", "SshPass-4411"),
    ("7z x weights.7z -pZipPass-9090", "ZipPass-9090"),
    # a *_CREDS variable's value
    ("AWS_CREDS=AKxx-creds-value-991", "AKxx-creds-value-991"),
    ("export DB_CREDS='user:pw-77aa'", "user:pw-77aa"),
    ("db_creds: creds-yaml-5566", "creds-yaml-5566"),
    ('{"service_creds": "json-creds-2468"}', "json-creds-2468"),
    # Cookie headers
    ("Cookie: session=abcdef123456; theme=dark", "abcdef123456"),
    ("set-cookie: session=sess-99887766; Path=/", "sess-99887766"),
    ('"cookie": "sid=cookie-json-1357"', "cookie-json-1357"),
    # login commands
    ("swanlab login -k swk-0a1b2c3d4e", "swk-0a1b2c3d4e"),
    ("swanlab login --api-key swk-0a1b2c3d4e", "swk-0a1b2c3d4e"),
    ("wandb login 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789abcdef01234567"),
    ("wandb login --relogin wbkey-abcdef123", "wbkey-abcdef123"),
    ("+ wandb login --host https://wandb.example wbkey-zz9911aa", "wbkey-zz9911aa"),
    ("huggingface-cli login --token hfx-abcdef123456", "hfx-abcdef123456"),
    ("huggingface-cli login --token=hfx-abcdef123456", "hfx-abcdef123456"),
    ("hf auth login --token hfx-zyxw98765", "hfx-zyxw98765"),
    # --api-key=X and its family
    ("curl --api-key=ak-123456abcdef https://x", "ak-123456abcdef"),
    ("python serve.py --openai-api-key=oak-5544332211", "oak-5544332211"),
    ("ray job submit --auth-token=rtok-88776655", "rtok-88776655"),
    # Authorization headers, whatever the scheme and spelling
    ("Authorization: token ghx-abcdef123", "ghx-abcdef123"),
    ("authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ('{"Authorization": "Bearer json-bearer-4242"}', "json-bearer-4242"),
    ("curl -H 'Authorization: ApiKey apikey-hdr-7777' https://x", "apikey-hdr-7777"),
    # *_SECRET / *_PASSWD names
    ("MY_SERVICE_SECRET=zz-secret-9911", "zz-secret-9911"),
    ("DB_PASSWD=pw-passwd-4433", "pw-passwd-4433"),
    ("my_secret: yaml-secret-7788", "yaml-secret-7788"),
    ("smtp_passwd = 'pw with space'", "pw with space"),
]
# Ordinary lines near those shapes: a redactor that blanks them hides the failure itself.
READABLE = [
    "gcc -pthread -pedantic -O2 -c flash_attn.c",
    "python -m pytest -pno:randomly tests",
    "ssh root@10.0.0.5 -p 8824",
    "mkdir -p /tmp/x && cp -pr src dst",
    "mysql -h db -P 3306 -u root",
    "Run `wandb login --relogin` to force relogin",
    "wandb login failed, retrying in 5 s",
    "swanlab: Login successfully. Hi, alice!",
    "cookies_enabled: true",
    "incredible results: mean_reward 0.83",
    "credits: 100",
    "num_creds: 4",
    "auth ok, 3 workers",
    "max_tokens: 1024",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "'task_pass_rate@4': 0.83",
]


@pytest.mark.parametrize(("text", "secret"), SECRET_FORMS, ids=[t[:40] for t, _ in SECRET_FORMS])
def test_each_secret_form_is_redacted(text: str, secret: str) -> None:
    out = Redactor().text(text)
    assert secret not in out and REDACTED in out, out
    assert "]]" not in out  # one redaction, not one redactor pattern eating another's marker
    assert all(secret not in line for line in Redactor().lines([text]))


@pytest.mark.parametrize("text", READABLE)
def test_ordinary_lines_stay_readable(text: str) -> None:
    assert Redactor().text(text) == text


def test_a_creds_variables_value_is_hidden_wherever_it_appears() -> None:
    redactor = Redactor([{"AWS_CREDS": "aws-creds-val-123", "COOKIE_JAR": "/tmp/cookies.txt"}])
    assert redactor.text("using aws-creds-val-123 now; jar /tmp/cookies.txt") == (
        f"using {REDACTED} now; jar /tmp/cookies.txt")


def test_the_secret_forms_row() -> None:
    leaked = [s for t, s in SECRET_FORMS if s in Redactor().text(t)]
    blanked = [t for t in READABLE if Redactor().text(t) != t]
    record("redaction, round 3 forms", "-pPASSWORD, *_CREDS, Cookie:, swanlab/wandb/huggingface-cli login, "
           "--api-key=, Authorization:, *_SECRET/*_PASSWD; and lines that must stay readable",
           len(SECRET_FORMS) + len(READABLE), f"{len(leaked)} leaked, {len(blanked)} readable lines blanked",
           passed=not leaked and not blanked)
    assert leaked == [] and blanked == []


LONG_LINES = {  # ~100 KB lines that made a redactor pattern quadratic (12 s for 48 KB of `mysql `, 1.4 s here)
    "many mysql words": "mysql " * 17_000,
    "many login commands": "wandb login --relogin " * 4_500,
    "long words": ("a" * 50 + " ") * 2_000,
    "one long word": "x" * 100_000,
}


@pytest.mark.parametrize("name", list(LONG_LINES))
def test_a_long_line_is_redacted_in_linear_time(name: str) -> None:
    import time

    started = time.process_time()
    Redactor().text(LONG_LINES[name])
    assert time.process_time() - started < 5.0  # linear: well under 1 s; quadratic: tens of seconds
