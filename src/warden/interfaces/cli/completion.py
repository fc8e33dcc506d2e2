"""Shell completion for bash, zsh and fish, generated from warden's own argparse parser.

The scripts are written out of the parser itself (every command, subcommand, option and
choice it knows), so they cannot drift from the CLI: a command added to a module completes
the day it is registered. Each script holds the same tables — per command path, its
subcommands, its options, which options take a value and the choices of those that have
some — and a small walker that finds the path of the words typed so far (skipping options
and their values; nothing after `--`, which is the sandboxed command's own). A workspace
name (a `NAME` argument, `-w/--workspace`) completes from `warden list --names`.

Pure: a parser in, text out. `cmd_completion` prints it.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

__all__ = ["Level", "levels", "script"]

SHELLS = ("bash", "zsh", "fish")
_WORKSPACE_OPTIONS = ("-w", "--workspace")


@dataclass
class Level:
    """What can follow one command path (`("fs",)`, `()` for `warden` itself)."""

    path: tuple[str, ...]
    commands: dict[str, str] = field(default_factory=dict)  # name → one-line help
    options: dict[str, str] = field(default_factory=dict)  # option string → help
    valued: list[str] = field(default_factory=list)  # options that take a value
    choices: dict[str, list[str]] = field(default_factory=dict)  # option → its values
    positional_choices: list[str] = field(default_factory=list)  # `audit verify`, `shell-init bash`
    workspace: bool = False  # its first positional is a workspace's name


def _help(action: argparse.Action) -> str:
    text = action.help if isinstance(action.help, str) and action.help != argparse.SUPPRESS else ""
    return " ".join(text.split())


def levels(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Level]:
    """Every command path of `parser`, depth first, with what can follow it."""
    level = Level(path)
    found = [level]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: _help(a) for a in action._choices_actions}
            for name, child in action.choices.items():
                level.commands[name] = helps.get(name, "")
                found.extend(levels(child, (*path, name)))
        elif action.option_strings:
            if action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                level.options[option] = _help(action)
                if action.nargs != 0:
                    level.valued.append(option)
                    if action.choices:
                        level.choices[option] = [str(c) for c in action.choices]
        else:
            if action.choices and not level.positional_choices:
                level.positional_choices = [str(c) for c in action.choices]
    positionals = [a for a in parser._actions if not a.option_strings
                   and not isinstance(a, argparse._SubParsersAction)]
    level.workspace = bool(positionals) and positionals[0].dest == "name" and not _names_other_thing(path)
    return found


def _names_other_thing(path: tuple[str, ...]) -> bool:
    """Commands whose NAME is not an existing workspace's: a new one, a template's, a bot's."""
    return path == ("create",) or path[:1] in (("template",), ("bot",))


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for `shell` (bash, zsh or fish)."""
    every = levels(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](every)


def _key(path: tuple[str, ...]) -> str:
    return " ".join(path)


def _words(items: list[str] | dict[str, str]) -> str:
    """Words for a shell's single-quoted string (option strings and command names hold no quote)."""
    return " ".join(w for w in items if "'" not in w)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# -- bash (also zsh's engine: see _zsh) ---------------------------------------------------------
def _bash_tables(every: list[Level]) -> str:
    lines = ["_warden_level() {  # $1: a command path → _w_cmds, _w_opts, _w_valued, _w_pos, _w_ws",
             '  _w_cmds=""; _w_opts=""; _w_valued=""; _w_pos=""; _w_ws=""', '  case "$1" in']
    for level in every:
        lines.append(f"    {_quoted(_key(level.path))})")
        for var, value in (("_w_cmds", _words(level.commands)), ("_w_opts", _words(level.options)),
                           ("_w_valued", _words(level.valued)), ("_w_pos", _words(level.positional_choices)),
                           ("_w_ws", "1" if level.workspace else "")):
            if value:
                lines.append(f"      {var}={_quoted(value)}")
        lines.append("      ;;")
    lines += ["  esac", "}", "_warden_choices() {  # $1: a command path, $2: an option → its values",
              '  case "$1|$2" in']
    for level in every:
        for option, values in level.choices.items():
            lines.append(f"    {_quoted(_key(level.path) + '|' + option)}) echo {_quoted(_words(values))} ;;")
    lines += ["  esac", "}"]
    return "\n".join(lines)


_BASH_WALK = r"""_warden_walk() {  # the words before the cursor → _w_path (a command path), _w_after (1: past --),
  # _w_npos (words at that path that were no command: a workspace's name already given)
  _w_path=""; _w_after=""; _w_npos=0
  local word skip=""
  _warden_level ""
  for word in "$@"; do
    if [ -n "$skip" ]; then skip=""; continue; fi
    case "$word" in
      --) _w_after=1; return ;;
      -*=*) ;;
      -*) case " $_w_valued " in *" $word "*) skip=1 ;; esac ;;
      *) case " $_w_cmds " in
           *" $word "*) _w_path="${_w_path:+$_w_path }$word"; _warden_level "$_w_path"; _w_npos=0 ;;
           *) _w_npos=$((_w_npos + 1)) ;;
         esac ;;
    esac
  done
}
_warden_workspaces() { command warden list --names 2>/dev/null; }
"""

_BASH = r"""# warden completion for bash, generated from warden's own parser.
# Load it with: source <(warden completion bash)   (in ~/.bashrc), or save it as
# ~/.local/share/bash-completion/completions/warden
{tables}
{walk}
_warden() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
  COMPREPLY=()
  _warden_walk "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"
  [ -n "$_w_after" ] && return 0  # the sandboxed command's own words: files
  case " $_w_valued " in
    *" $prev "*)
      case "$prev" in
        -w|--workspace) COMPREPLY=($(compgen -W "$(_warden_workspaces)" -- "$cur")) ;;
        *) COMPREPLY=($(compgen -W "$(_warden_choices "$_w_path" "$prev")" -- "$cur")) ;;
      esac
      return 0 ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$_w_opts" -- "$cur"))
  elif [ -n "$_w_ws" ] && [ "$_w_npos" = 0 ]; then
    COMPREPLY=($(compgen -W "$(_warden_workspaces) $_w_cmds" -- "$cur"))
  elif [ -n "$_w_cmds" ]; then
    COMPREPLY=($(compgen -W "$_w_cmds" -- "$cur"))
  elif [ -n "$_w_pos" ]; then
    COMPREPLY=($(compgen -W "$_w_pos" -- "$cur"))
  fi
}}
complete -o bashdefault -o default -F _warden warden
"""


def _bash(every: list[Level]) -> str:
    return _BASH.format(tables=_bash_tables(every), walk=_BASH_WALK)


# -- zsh: the same tables and walker (zsh runs them as they are), answers given with compadd ----
_ZSH = r"""#compdef warden
# warden completion for zsh, generated from warden's own parser.
# Load it with: source <(warden completion zsh)   (in ~/.zshrc, after compinit), or save it as
# _warden in a folder of your $fpath
{tables}
{descriptions}
{walk}
_warden() {{
  emulate -L zsh
  setopt sh_word_split
  local cur="${{words[CURRENT]}}" prev="${{words[CURRENT-1]}}"
  _warden_walk "${{(@)words[2,CURRENT-1]}}"
  if [[ -n "$_w_after" ]]; then _files; return; fi
  if [[ " $_w_valued " == *" $prev "* ]]; then
    case "$prev" in
      -w|--workspace) compadd -- $(_warden_workspaces) ;;
      *) local values="$(_warden_choices "$_w_path" "$prev")"
         if [[ -n "$values" ]]; then compadd -- ${{=values}}; else _files; fi ;;
    esac
    return
  fi
  if [[ "$cur" == -* ]]; then
    compadd -- ${{=_w_opts}}
  elif [[ -n "$_w_ws" && "$_w_npos" == 0 ]]; then
    compadd -- $(_warden_workspaces) ${{=_w_cmds}}
  elif [[ -n "$_w_cmds" ]]; then
    local -a names shown
    local name
    for name in ${{=_w_cmds}}; do
      names+=("$name"); shown+=("$name  -- $(_warden_about "${{_w_path:+$_w_path }}$name")")
    done
    compadd -l -d shown -- "${{names[@]}}"
  elif [[ -n "$_w_pos" ]]; then
    compadd -- ${{=_w_pos}}
  else
    _files
  fi
}}
if [[ "${{funcstack[1]}}" == _warden ]]; then _warden "$@"; else compdef _warden warden; fi
"""


def _zsh(every: list[Level]) -> str:
    about = ["_warden_about() {  # $1: a command path → its one-line help", '  case "$1" in']
    for level in every:
        for name, text in level.commands.items():
            about.append(f"    {_quoted(_key((*level.path, name)))}) echo {_quoted(text)} ;;")
    about += ["  esac", "}"]
    return _ZSH.format(tables=_bash_tables(every), descriptions="\n".join(about), walk=_BASH_WALK)


# -- fish -----------------------------------------------------------------------------------------
_FISH_HEAD = r"""# warden completion for fish, generated from warden's own parser.
# Load it with: warden completion fish | source   (in config.fish), or save it as
# ~/.config/fish/completions/warden.fish
function __warden_level --argument-names path
    set -g __w_cmds; set -g __w_valued; set -g __w_pos; set -g __w_ws
    switch $path
"""

_FISH_WALK = r"""    end
end
function __warden_walk  # the words before the cursor → __w_path, __w_after
    set -g __w_path ""; set -g __w_after ""; set -g __w_npos 0
    set -l skip ""
    __warden_level ""
    for word in (commandline -opc)[2..-1]
        if test -n "$skip"; set skip ""; continue; end
        switch $word
            case --
                set -g __w_after 1; return
            case '-*=*'
            case '-*'
                contains -- $word $__w_valued; and set skip 1
            case '*'
                if contains -- $word $__w_cmds
                    set -g __w_path (string trim -- "$__w_path $word")
                    __warden_level "$__w_path"
                    set -g __w_npos 0
                else
                    set -g __w_npos (math $__w_npos + 1)
                end
        end
    end
end
function __warden_at --argument-names path  # the words so far are this command path
    __warden_walk
    test -z "$__w_after"; and test "$__w_path" = "$path"
end
function __warden_wants --argument-names what  # at this path: a command, a choice or a workspace next
    __warden_walk
    test -z "$__w_after"; or return 1
    set -l prev (commandline -opc)[-1]
    contains -- $prev $__w_valued; and return 1
    switch $what
        case command; test -n "$__w_cmds"
        case choice; test -z "$__w_cmds"; and test -n "$__w_pos"
        case workspace; test -n "$__w_ws"; and test "$__w_npos" = 0
    end
end
complete -c warden -f
complete -c warden -n '__warden_walk; test -n "$__w_after"' -F
complete -c warden -n '__warden_wants workspace' -a '(command warden list --names 2>/dev/null)'
"""


def _fish_list(words: list[str] | dict[str, str]) -> str:
    return " ".join(_quoted(w) for w in words)


def _fish(every: list[Level]) -> str:
    out = [_FISH_HEAD]
    for level in every:
        out.append(f"        case {_quoted(_key(level.path))}")
        for var, items in (("__w_cmds", list(level.commands)), ("__w_valued", level.valued),
                           ("__w_pos", level.positional_choices)):
            if items:
                out.append(f"            set -g {var} {_fish_list(items)}")
        if level.workspace:
            out.append("            set -g __w_ws 1")
    out.append(_FISH_WALK)
    for level in every:
        at = f"__warden_at {_quoted(_key(level.path))}"
        for name, text in level.commands.items():
            out.append(f"complete -c warden -n {_quoted(at + '; and __warden_wants command')} "
                       f"-a {_quoted(name)} -d {_quoted(text)}")
        for value in level.positional_choices:
            out.append(f"complete -c warden -n {_quoted(at + '; and __warden_wants choice')} -a {_quoted(value)}")
        for option, text in level.options.items():
            flag = f"-l {_quoted(option[2:])}" if option.startswith("--") else f"-s {_quoted(option[1:])}"
            if len(option) > 2 and not option.startswith("--"):
                flag = f"-o {_quoted(option[1:])}"
            valued = ""
            if option in level.choices:
                valued = f" -x -a {_quoted(' '.join(level.choices[option]))}"
            elif option in _WORKSPACE_OPTIONS and option in level.valued:
                valued = " -x -a '(command warden list --names 2>/dev/null)'"
            elif option in level.valued:
                valued = " -r -F"
            out.append(f"complete -c warden -n {_quoted(at)} {flag} -d {_quoted(text)}{valued}")
    return "\n".join(out) + "\n"
