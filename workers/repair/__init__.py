"""Where repairs come from and how they are applied: the catalogue's plan, a site hook, the LLM adviser, the YAML."""
