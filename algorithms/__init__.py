"""Built-in algorithms, written only against flegel's public API (as a user would)."""
