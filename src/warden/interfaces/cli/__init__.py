"""The `warden` command line."""
