"""Front ends: CLI, HTTP API. They parse, call services, render results."""
