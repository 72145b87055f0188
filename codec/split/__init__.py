"""A captured stream cut into parts that decode independently, with the single-process result."""
