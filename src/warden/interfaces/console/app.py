"""The console's Textual application: five tabs over one `Commands`, a status line, a footer."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Header, Static, TabbedContent, TabPane

from warden.core.errors import WardenError
from warden.interfaces.cli.output import printable
from warden.interfaces.console.approvals import ApprovalsTab
from warden.interfaces.console.audit import AuditTab
from warden.interfaces.console.commands import Commands, Done, home_relative
from warden.interfaces.console.grants import GrantsTab
from warden.interfaces.console.sandbox import SandboxTab
from warden.interfaces.console.workspaces import WorkspacesTab

if TYPE_CHECKING:
    from warden.bootstrap import App as WardenApp

__all__ = ["TABS", "WardenConsole"]

Tab = WorkspacesTab | SandboxTab | GrantsTab | ApprovalsTab | AuditTab

TABS = ("workspaces", "sandbox", "grants", "approvals", "audit")
POLL_SECONDS = 1.0  # how often the open Audit or Approvals tab looks for news


class WardenConsole(App[None]):
    """`warden console`."""

    TITLE = "Warden console"
    ENABLE_COMMAND_PALETTE = False  # every action has its key in the footer
    CSS = """
    TabbedContent, ContentSwitcher, TabPane { height: 1fr; }
    TabPane { padding: 0; }
    #status { height: 1; padding: 0 1; background: $panel; }
    #status.refused { color: $text-error; }
    #workspace-table, #grant-table, #audit-table, #approval-table { height: 1fr; }
    #bot-table { height: auto; max-height: 8; }
    #setting-table { height: 1fr; }
    #path-table { height: 1fr; }
    #workspace-detail { height: auto; max-height: 8; padding: 0 1; border-top: solid $primary; }
    #setting-help, #audit-verdict { height: auto; padding: 0 1; color: $text-muted; }
    .editor { height: auto; }
    .editor Label { padding: 1 1; width: 32; }
    .editor Input { width: 1fr; }
    #approval-preview-box { height: 2fr; border-top: solid $primary; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "tab('workspaces')", "Workspaces", show=False),
        Binding("2", "tab('sandbox')", "Sandbox", show=False),
        Binding("3", "tab('grants')", "Grants", show=False),
        Binding("4", "tab('approvals')", "Approvals", show=False),
        Binding("5", "tab('audit')", "Audit", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, open_app: Callable[[], WardenApp], *, poll: bool = True) -> None:
        super().__init__()
        self.commands = Commands(open_app)
        self._poll = poll

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with TabbedContent(initial="workspaces"):
            with TabPane("1 Workspaces", id="workspaces"):
                yield WorkspacesTab(self.commands)
            with TabPane("2 Sandbox", id="sandbox"):
                yield SandboxTab(self.commands)
            with TabPane("3 Grants", id="grants"):
                yield GrantsTab(self.commands)
            with TabPane("4 Approvals", id="approvals"):
                yield ApprovalsTab(self.commands)
            with TabPane("5 Audit", id="audit"):
                yield AuditTab(self.commands)
        yield Static(id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = home_relative(self.commands.app.home.root, self.commands.environ)
        self._reload("workspaces")
        if self._poll:
            self.set_interval(POLL_SECONDS, self._poll_news)

    def on_unmount(self) -> None:
        self.commands.close()

    def _pane(self, tab: str) -> Tab:
        pane = self.query_one(f"#{tab}-tab")
        assert isinstance(pane, WorkspacesTab | SandboxTab | GrantsTab | ApprovalsTab | AuditTab)
        return pane

    def _reload(self, tab: str) -> None:
        try:
            self._pane(tab).reload()
        except WardenError as exc:  # a broken config, a locked registry: said, the console stays
            self.say(Done(("console",), False, None, printable(exc.message), exc.code))

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        tab = event.pane.id or "workspaces"
        self._reload(tab)
        table = self._pane(tab).query("DataTable").first()
        table.focus()

    def _poll_news(self) -> None:
        active = self.query_one(TabbedContent).active
        pane = self._pane(active) if active in ("approvals", "audit") else None
        if isinstance(pane, ApprovalsTab | AuditTab):
            # A failure is said on the next reload the person asks for: a poll must not flood the line.
            with suppress(WardenError):
                pane.reload(quiet=True)

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def say(self, done: Done) -> None:
        """Put an action's outcome on the status line, with the command that does the same."""
        status = self.query_one("#status", Static)
        status.set_class(not done.ok, "refused")
        status.update(Text(f"{done.line}   ({done.command})" if done.ok else done.line))
