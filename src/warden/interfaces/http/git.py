"""Git routes for bots: a repository's status, the diff `stage` would propose, the proposals
waiting, staging one, and asking to push one: a bot's push always waits for a person's approval
(202; the approvals queue then carries it out through GitService.push); the person pushes with
`warden git NAME push`.

The grant decides first: `read` for looking, `write` over the whole workspace for staging (a
proposal takes in every file of the working tree, so a grant limited to zones cannot make one).
The git service audits each operation with the caller's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from warden.core.errors import Conflict
from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.models import ApprovalView, PendingBody
from warden.interfaces.http.routes import Token, WorkspaceName, token_of
from warden.interfaces.http.statuses import ERROR_RESPONSES

if TYPE_CHECKING:
    from warden.bootstrap import App

__all__ = ["router"]


class StageRequest(BaseModel):
    message: str = Field(min_length=1, max_length=65536, description="the proposal's commit message")


class GitChange(BaseModel):
    code: str
    path: str


class GitStatusBody(BaseModel):
    branch: str | None
    upstream: str | None
    ahead: int
    behind: int
    changes: list[GitChange]


class GitFile(BaseModel):
    status: str
    path: str


class GitDiffBody(BaseModel):
    files: list[GitFile]
    diff: str


class PushRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    proposal: str | None = Field(None, max_length=64, description="the proposal's id; none: the only one waiting")


class ProposalBody(BaseModel):
    id: str
    commit: str
    parent: str
    branch: str
    message: str
    actor: str
    created: str
    files: list[GitFile]
    diff: str | None = None
    stale: bool = Field(False, description="made on an older HEAD: it cannot be pushed (stage again)")


def router(app: App) -> APIRouter:
    api = APIRouter(responses=ERROR_RESPONSES, tags=["git"])

    @api.get("/v1/workspaces/{name}/git/status", response_model=GitStatusBody)
    @threaded
    def git_status(name: WorkspaceName, token: Token) -> dict[str, Any]:
        """The branch, how far it is from its upstream, and the changed paths (needs `read`)."""
        with Call(app, "git.status", name) as call:
            call.authenticate(token_of(token))
            call.authorize(name, "read")
            call.audited_by_service = True
            return app.git.status(name, actor=call.actor).to_json()

    @api.get("/v1/workspaces/{name}/git/diff", response_model=GitDiffBody)
    @threaded
    def git_diff(name: WorkspaceName, token: Token) -> dict[str, Any]:
        """What staging would propose now: the working tree against HEAD (needs `read`)."""
        with Call(app, "git.diff", name) as call:
            call.authenticate(token_of(token))
            call.authorize(name, "read")
            call.audited_by_service = True
            return app.git.diff(name, actor=call.actor).to_json()

    @api.get("/v1/workspaces/{name}/git/staged", response_model=list[ProposalBody])
    @threaded
    def git_staged(name: WorkspaceName, token: Token) -> list[dict[str, Any]]:
        """The proposals waiting for the person (needs `read`)."""
        with Call(app, "git.staged", name) as call:
            call.authenticate(token_of(token))
            call.authorize(name, "read")
            call.audited_by_service = True
            return [p.to_json() for p in app.git.staged(name, actor=call.actor)]

    @api.post("/v1/workspaces/{name}/git/stage", response_model=ProposalBody, status_code=201)
    @threaded
    def git_stage(name: WorkspaceName, body: StageRequest, token: Token) -> dict[str, Any]:
        """Propose the working tree's changes as one commit on HEAD, for the person to review and
        push (needs `write` on the whole workspace); the proposal with its diff."""
        with Call(app, "git.stage", name) as call:
            call.authenticate(token_of(token))
            call.authorize(name, "write", whole_workspace=True)
            call.audited_by_service = True
            return app.git.stage(name, body.message, actor=call.actor).to_json()

    @api.post("/v1/workspaces/{name}/git/push", status_code=202, response_model=PendingBody,
              responses={202: {"description": "the push waits for a person's approval"}})
    @threaded
    def git_push(name: WorkspaceName, body: PushRequest, token: Token) -> PendingBody:
        """Ask to push a proposal (needs `write` on the whole workspace): a bot's push always
        waits for a person (202 with the approval); once approved Warden pushes exactly that
        commit, fast-forward only. Poll GET /v1/approvals/{id}."""
        with Call(app, "git.push", name) as call:
            principal = call.authenticate(token_of(token))
            call.authorize(name, "write", whole_workspace=True)
            # The one proposal asked for, read alone (not every one waiting) and audited once: by this call.
            proposal = app.git.waiting(name, body.proposal, actor=call.actor)
            wanted = proposal.id
            if proposal.stale:
                raise Conflict(f"proposal {wanted} was made on an older HEAD (a pull or another push since) and "
                               "cannot be pushed: stage again")
            record = app.approvals.ask(principal, name, "git.push", wanted, zone=None, rule="git.push needs a person",
                                       detail={"proposal": wanted, "commit": proposal.commit,
                                               "branch": proposal.branch, "message": proposal.message})
            call.allow("approval.pending")
            call.note(approval=record.id, proposal=wanted)
            # The same line a file change that waits is answered with: the bot (and the model
            # reading its output) learns the id and what the person has to do.
            message = (f"push of proposal {wanted} to {proposal.branch} in workspace {name} waits for a person's "
                       f"approval (git.push needs a person); ask them to run `warden approve {record.id}`, "
                       f"and poll GET /v1/approvals/{record.id}")
            return PendingBody(approval=ApprovalView(**app.approvals.view(record)), message=message)

    return api
