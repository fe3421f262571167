"""Naming a failure: the signature catalogue, the evidence a line gives, the failing command, redaction."""
