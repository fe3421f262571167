"""Reading a blueprint: its markdown, the launch command and YAML it names, sweeps and swarms, and what submission
checks."""
