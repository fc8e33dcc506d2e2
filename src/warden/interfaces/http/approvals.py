"""Approval routes: a bot polls its request; a bot given `approve` answers others' requests.

`GET /v1/approvals/{id}` shows a request to the bot that asked or to a holder of `approve` on
its workspace (anyone else gets 404: ids are not a way to learn what others asked).
`GET /v1/workspaces/{name}/approvals` lists a workspace's requests for an `approve` holder;
`POST /v1/approvals/{id}/approve|deny` answers one, never the answering bot's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Body, Path, Query

from warden.core.approvals import APPROVAL_ID
from warden.core.errors import NotFound, WardenError
from warden.interfaces.http.calls import Call, threaded
from warden.interfaces.http.models import ApprovalAnswer, ApprovalBody, ApprovalList, ApprovalView
from warden.interfaces.http.routes import Token, WorkspaceName, token_of
from warden.interfaces.http.statuses import ERROR_RESPONSES

if TYPE_CHECKING:
    from warden.bootstrap import App
    from warden.core.approvals import ApprovalRecord

__all__ = ["router"]

ApprovalId = Annotated[str, Path(pattern=APPROVAL_ID.pattern, description="an approval id (apr_…)")]


def router(app: App) -> APIRouter:
    api = APIRouter(responses=ERROR_RESPONSES, tags=["approvals"])
    approvals = app.approvals

    def may_answer(call: Call, record: ApprovalRecord) -> None:
        """Denied unless the caller holds `approve` where the request lies: its zone, or the whole
        workspace for a path in no zone (a grant limited to some zones answers for those only). A
        request reaching several zones (a move into another `ask` zone) needs it over each."""
        for zone in record.zones:
            call.authorize(record.workspace, "approve", zone=zone, whole_workspace=zone is None)

    def visible(call: Call, approval_id: str) -> ApprovalRecord:
        """The request, when the caller's very grant asked it or the caller may answer it;
        NotFound otherwise (an id is not a way to learn what others asked, or that they did)."""
        assert call.principal is not None
        record = approvals.get(approval_id)
        if call.principal.accessor != record.accessor:
            try:
                may_answer(call, record)
            except WardenError:
                raise NotFound(f"no approval request {approval_id}") from None
        return record

    @api.get("/v1/approvals/{approval_id}", response_model=ApprovalBody)
    @threaded
    def get_approval(approval_id: ApprovalId, token: Token) -> ApprovalBody:
        """A request's status: pending, approving, approved (carried out), denied, expired or failed."""
        with Call(app, "approvals.get", approval_id) as call:
            call.authenticate(token_of(token))
            record = visible(call, approval_id)
            call.allow("approval.visible")
            return ApprovalBody(approval=ApprovalView(**approvals.view(record)))

    @api.get("/v1/workspaces/{name}/approvals", response_model=ApprovalList)
    @threaded
    def list_approvals(name: WorkspaceName, token: Token,
                       all: Annotated[bool, Query(description="answered ones too")] = False) -> ApprovalList:
        """A workspace's requests waiting for an answer (needs `approve`)."""
        with Call(app, "approvals.list", name) as call:
            call.authenticate(token_of(token))
            call.authorize(name, "approve")
            assert call.principal is not None
            scope = app.auth.zone_scope(call.principal, lambda: app.sandbox_paths.zones(app.workspaces.get(name)))
            records = [r for r in approvals.listed(workspace=name, everything=all)
                       if scope is None or set(r.zones) <= set(scope)]  # `all` is the query's here
            return ApprovalList(approvals=[ApprovalView(**approvals.view(r)) for r in records])

    def answer(approval_id: str, token: str | None, body: ApprovalAnswer | None, approve: bool) -> ApprovalBody:
        verb = "approve" if approve else "deny"
        with Call(app, f"approvals.{verb}", approval_id) as call:
            principal = call.authenticate(token)
            record = approvals.get(approval_id)
            try:
                may_answer(call, record)
            except WardenError:
                raise NotFound(f"no approval request {approval_id}") from None  # as GET: no existence oracle
            call.audited_by_service = True  # the service's approval.* event names this caller
            done = approvals.answer(approval_id, approve=approve, actor=principal.actor, answerer=principal,
                                    note=body.note if body else None)
            return ApprovalBody(approval=ApprovalView(**approvals.view(done)))

    @api.post("/v1/approvals/{approval_id}/approve", response_model=ApprovalBody)
    @threaded
    def approve(approval_id: ApprovalId, token: Token,
                body: Annotated[ApprovalAnswer | None, Body()] = None) -> ApprovalBody:
        """Approve another bot's request (needs `approve` on its workspace); Warden carries it out."""
        return answer(approval_id, token_of(token), body, True)

    @api.post("/v1/approvals/{approval_id}/deny", response_model=ApprovalBody)
    @threaded
    def deny(approval_id: ApprovalId, token: Token,
             body: Annotated[ApprovalAnswer | None, Body()] = None) -> ApprovalBody:
        """Deny another bot's request (needs `approve` on its workspace); nothing is done."""
        return answer(approval_id, token_of(token), body, False)

    return api
