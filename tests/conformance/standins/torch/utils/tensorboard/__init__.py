"""Stand-in ``torch.utils.tensorboard``: verl's tensorboard backend writes through this.

Real TensorBoard writes ``events.out.tfevents.*`` files; this writer appends one JSON line
per scalar to ``<log_dir>/scalars.conformance.jsonl`` so a test can see what was logged.
"""

import json
import os


class SummaryWriter:
    def __init__(self, log_dir=None, *args, **kwargs):
        self.log_dir = log_dir or "runs"
        os.makedirs(self.log_dir, exist_ok=True)
        self._path = os.path.join(self.log_dir, "scalars.conformance.jsonl")

    def add_scalar(self, tag, scalar_value, global_step=None, *args, **kwargs):
        # Like torch's writer, a non-number fails here: `float('main_val_dataset')` raises
        # `ValueError: could not convert string to float: 'main_val_dataset'` (seen with the real
        # torch 2.13.0+cpu writer on the same dict AgentJet 0.0.1 logs at every validation).
        value = float(scalar_value)
        with open(self._path, "a") as fh:
            fh.write(json.dumps({"tag": tag, "value": value, "step": global_step}) + "\n")

    def flush(self):
        return None

    def close(self):
        return None
