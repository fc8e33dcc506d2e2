"""Environment builders: interpreters, Python layers (uv), Node layers (npm), thin venvs."""
