"""Multi-node (gang) runs: the head's side, the other ranks' jobs, their re-adoption and environment."""
