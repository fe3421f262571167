"""Trainer entry points started by the launcher as a child process, like the real backbones."""
