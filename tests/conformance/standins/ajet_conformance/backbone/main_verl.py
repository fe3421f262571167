"""Stand-in for `ajet.backbone.main_verl`, the module the real launcher runs as its training
subprocess (`python -m ajet.backbone.main_verl --config-path <exp dir> --config-name yaml_backup.yaml`).

`sitecustomize` routes that module name here. Real: Hydra's `@hydra.main` (so the YAML the
launcher wrote is composed again through its `hydra.searchpath`, outputs/ and Hydra's error
report included), AgentJet's `get_runtime_env`, loguru set-up and the trainer pieces listed in
`ajet_conformance.trainer`. Stood in: `ray.init` and the `TaskRunner` actor (the trainer runs in
this process; its output carries Ray's `(TaskRunner pid=N) ` prefix, its exceptions come out as
the real `ray.exceptions.RayTaskError(...)`), tokenizer/model loading, worker groups.
"""

import os
import socket

import hydra
from ajet.utils.core_env_vars import get_runtime_env
from ajet.utils.launch_utils import set_loguru_default_color
from beast_logger import print_dict
from omegaconf import OmegaConf

from ajet_conformance import knobs as knobs_mod
from ajet_conformance import rayemu

set_loguru_default_color()


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def main(config):
    run_ppo(config)


def run_ppo(config) -> None:
    runtime_env = get_runtime_env()
    print_dict(runtime_env["env_vars"], "runtime_env")
    knobs = knobs_mod.read(config)
    error = None
    with rayemu.actor_output("TaskRunner", enabled=bool(knobs["ray_prefix"])):
        try:
            TaskRunner().run(config)
        except Exception as exc:  # noqa: BLE001 - leaves the "actor" the way ray.get delivers it
            error = exc
    if error is not None:
        raise rayemu.ray_task_error(error) from None


class TaskRunner:
    def run(self, config):
        from pprint import pprint

        from ajet_conformance.trainer import StandinTrainer

        print(f"TaskRunner hostname: {socket.gethostname()}, PID: {os.getpid()}")
        pprint(OmegaConf.to_container(config, resolve=True))
        OmegaConf.resolve(config)
        trainer = StandinTrainer(config)
        trainer.init_workers()
        trainer.fit()


if __name__ == "__main__":
    main()
