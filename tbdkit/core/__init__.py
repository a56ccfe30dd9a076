"""The bottom floor: errors, paths, metrics with units, the agent's line format, framework names, statistics."""
