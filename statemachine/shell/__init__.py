"""Reading shell: the launch command's syntax tree, what it runs, where it logs in, and rewriting it safely."""
