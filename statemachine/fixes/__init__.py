"""Deciding what to do about a failure: preflight fixes, repairs, advice, and the give-up verdict."""
