"""Examples shown at the end of each command's `--help`, keyed by the command as its usage
line names it (`fs NAME write`). Imported only when help is printed; a test holds every
command to at least one (tests/interfaces/test_cli_help.py).
"""

from __future__ import annotations

__all__ = ["EXAMPLES", "examples"]

EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ("warden init", "warden create notes", "warden run notes -- python -V", "warden doctor"),
    "init": ("warden init", "warden init --reset-keys --yes   # new keys: every grant token stops working"),
    "config": ("warden config show", "warden config set sandbox.enabled true"),
    "config show": ("warden config show", "warden config show --json"),
    "config get": ("warden config get sandbox.timeout",),
    "config set": ("warden config set sandbox.memory 512M", "warden config set sandbox.enabled true"),
    "create": ("warden create notes", "warden create api --template web-dev --python 3.12",
               "warden create scratch --type temporary --ttl 2h", "warden create app --blob project.tar.gz"),
    "list": ("warden list", "warden list --status archived --type bot"),
    "info": ("warden info notes", "warden info notes --json"),
    "destroy": ("warden destroy notes --yes   # keeps an archive; `warden unarchive notes` brings it back",
                "warden destroy scratch --yes --no-archive"),
    "audit": ("warden audit --workspace notes --limit 20", "warden audit verify"),
    "fs": ("warden fs notes ls /", "warden fs notes cat /README.md", "echo hi | warden fs notes write /hello.txt"),
    "fs NAME ls": ("warden fs notes ls /", "warden fs notes ls -l /src"),
    "fs NAME cat": ("warden fs notes cat /README.md",),
    "fs NAME stat": ("warden fs notes stat /src",),
    "fs NAME write": ("echo hi | warden fs notes write /hello.txt", "warden fs notes write /data.csv < data.csv"),
    "fs NAME rm": ("warden fs notes rm /hello.txt", "warden fs notes rm -r /build"),
    "fs NAME mkdir": ("warden fs notes mkdir /src/pkg",),
    "sandbox": ("warden sandbox list", "warden sandbox add ~/datasets --mode ro --workspace notes"),
    "sandbox list": ("warden sandbox list", "warden sandbox list --workspace notes"),
    "sandbox add": ("warden sandbox add ~/datasets --mode ro --workspace notes",),
    "sandbox remove": ("warden sandbox remove ~/.aws",),
    "sandbox check": ("warden sandbox check ~/.ssh/id_ed25519 --op read",),
    "run": (
        "warden run notes -- python -V", "warden run notes --timeout 30s --memory 1G -- pytest -q",
        "warden run notes --net allow --allow-domain pypi.org -- pip download requests",
        "warden run notes --cwd src -- pytest -q   # starts in the workspace's src folder",
        "warden run notes --detach -- python -m http.server 8000   # prints its id; see `warden ps`",
        "warden run notes --tty -- python   # an interactive REPL on a terminal"),
    "shell": ("warden shell notes", "warden shell notes --timeout 2h --cwd src"),
    "ps": ("warden ps notes", "warden ps notes --json"),
    "logs": ("warden logs notes 4f2a9c0e1b3d5a7c", "warden logs notes 4f2a9c0e1b3d5a7c --follow"),
    "kill": ("warden kill notes 4f2a9c0e1b3d5a7c", "warden kill notes 4f2a9c0e1b3d5a7c --signal KILL"),
    "wait": ("warden wait notes 4f2a9c0e1b3d5a7c", "warden wait notes 4f2a9c0e1b3d5a7c --timeout 5m"),
    "doctor": ("warden doctor", "warden doctor --fix"),
    "backup": ("warden backup warden.tar.gz", "warden backup --workspaces full.tar.gz"),
    "restore": ("warden restore warden.tar.gz", "warden restore warden.tar.gz --yes"),
    "template": ("warden template list", "warden template show web-dev"),
    "template list": ("warden template list",),
    "template show": ("warden template show default",),
    "template validate": ("warden template validate my-template.yaml",),
    "snapshot": ("warden snapshot build default", "warden snapshot prune --dry-run"),
    "snapshot build": ("warden snapshot build default", "warden snapshot build web-dev --python 3.12 --rebuild"),
    "snapshot list": ("warden snapshot list",),
    "snapshot prune": ("warden snapshot prune --dry-run", "warden snapshot prune"),
    "health": ("warden health notes", "warden health notes --repair"),
    "install": ("warden install notes requests rich", "warden install notes --node left-pad"),
    "suspend": ("warden suspend notes",),
    "resume": ("warden resume notes",),
    "archive": ("warden archive notes",),
    "unarchive": ("warden unarchive notes",),
    "cleanup": ("warden cleanup --older-than 30d --dry-run", "warden cleanup --older-than 30d"),
    "bot": ("warden bot register helper", "warden bot list"),
    "bot register": ("warden bot register helper",),
    "bot list": ("warden bot list",),
    "bot rm": ("warden bot rm helper",),
    "grant": ("warden grant notes helper --permissions read,execute --ttl 2h",
              "warden grant notes helper --permissions read,write --zones src,tests",
              "warden grant notes helper --permissions read,execute --allow-domain pypi.org:443  # network on request"),
    "grants": ("warden grants notes",),
    "revoke": ("warden revoke notes helper", "warden revoke notes --accessor ACCESSOR"),
    "secret": ("printf %s \"$TOKEN\" | warden secret set GITHUB_TOKEN", "warden secret list"),
    "secret set": ("printf %s \"$TOKEN\" | warden secret set GITHUB_TOKEN",),
    "secret list": ("warden secret list",),
    "secret rm": ("warden secret rm GITHUB_TOKEN",),
    "secret rotate-key": ("warden secret rotate-key",),
    "serve": ("warden serve", "warden serve --host 127.0.0.1 --port 8765"),
    "demo": ("warden demo",),
    "watch": ("warden watch notes", "warden watch notes --json --count 1   # the next batch of changes, as JSON",
              "warden watch notes --timeout 10m"),
}


def examples(prog: str) -> tuple[str, ...]:
    """The examples of the command whose usage reads `prog` (`warden fs NAME write`)."""
    return EXAMPLES.get(prog.removeprefix("warden").strip(), ())
