"""Who is who on a node: this node's identity and GPUs (`this_node`), and which process drives an
experiment and whether it is provably gone (`owner_identity`). Below every other `workers/` sub-package:
the driver, the supervisor and the gang all ask, and none of them owns the answer."""
