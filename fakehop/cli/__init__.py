"""The `fakehop` command (main.main)."""
