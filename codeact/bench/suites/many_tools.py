"""``many-tools``: 25 tasks over 364 tools on 12 MCP servers the suite starts itself.

Each task needs 2 to 5 of the tools (a search by name, then the records that
belong to it, sometimes one more hop across systems), so the interesting
number is not whether an agent can solve it but what it costs to carry every
tool's definition: CodeAct with ``tool_disclosure="all"`` puts all 364 stubs
in every prompt, ``on_demand`` only a catalogue of the twelve namespaces and
``search_tools``; ReAct function calling sends every schema with every
request. ``benchmarks/many_tools_bench.py`` runs the three side by side.

The servers (:mod:`.many_tools_server`, one process per domain of
:mod:`.many_tools_world`) are started once per process, on the first task
that needs them, and shared by every episode: their tools only read
deterministic data, so an episode cannot change what another sees. They stop
when the process exits (or :func:`close_servers`).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from .._plan import Plan, PlanSteps, call
from .._task import Oracle, Task, TaskContext

from . import many_tools_world as world

NAME = "many-tools"
DESCRIPTION = "2-5 tool chains over 364 tools on 12 generated MCP servers (tool disclosure: all vs on demand)"

SERVER_SCRIPT = Path(__file__).resolve().with_name("many_tools_server.py")
_lock = threading.Lock()
_toolset: Any = None


def server_configs() -> list[Any]:
    """The twelve servers' configurations (stdio: this Python runs the generated server script)."""
    from codeact.mcp import MCPServerConfig

    # always_allow "*": the suite's own servers act on a generated in-memory world, nothing outside it, and a
    # benchmark has no one to ask (MCP tools not marked read-only are refused there otherwise).
    return [MCPServerConfig(d.name, command=sys.executable, args=(str(SERVER_SCRIPT), d.name), connect_timeout=120,
                            always_allow=("*",))
            for d in world.DOMAINS]


def shared_toolset() -> Any:
    """The open :class:`~codeact.mcp.MCPToolset` of the twelve servers (started on first use, then shared)."""
    global _toolset
    with _lock:
        if _toolset is None or _toolset.closed:
            from codeact.mcp import MCPToolset

            _toolset = MCPToolset(server_configs()).open()
        return _toolset


def close_servers() -> None:
    """Stop the shared servers (they also stop when the process exits)."""
    global _toolset
    with _lock:
        if _toolset is not None:
            _toolset.close()
            _toolset = None


def make_tools(ctx: TaskContext) -> list[Any]:
    """Every task gets all 364 tools (the point of the suite); they are shared and read-only."""
    return list(shared_toolset())


# --------------------------------------------------------------------------- plans (self-contained)


def _overdue_total() -> PlanSteps:
    found = yield call("search_customers", query="Quartz Textiles")
    invoices = yield call("invoices_for_customer", customer_id=found[0]["id"])
    return sum(i["amount"] for i in invoices if i["status"] == "overdue")


def _manager_department() -> PlanSteps:
    found = yield call("search_customers", query="Harbor Works")
    manager = yield call("get_employee", employee_id=found[0]["employee_id"])
    department = yield call("get_department", department_id=manager["department_id"])
    return department["name"]


def _supplier_products() -> PlanSteps:
    found = yield call("search_suppliers", query="Harbor Robotics")
    products = yield call("products_for_supplier", supplier_id=found[0]["id"])
    return sorted(p["name"] for p in products if p["status"] == "active")


def _server_incidents() -> PlanSteps:
    found = yield call("search_servers", query="harbor-12")
    incidents = yield call("incidents_for_server", server_id=found[0]["id"])
    return sum(1 for i in incidents if i["status"] != "resolved")


def _certificates() -> PlanSteps:
    found = yield call("search_servers", query="ember-19")
    certificates = yield call("certificates_for_server", server_id=found[0]["id"])
    return min(c["days_left"] for c in certificates)


def _coupons() -> PlanSteps:
    found = yield call("search_campaigns", query="Lunar Pine Campaign")
    coupons = yield call("coupons_for_campaign", campaign_id=found[0]["id"])
    return max(c["discount_percent"] for c in coupons if c["status"] == "valid")


def _risks() -> PlanSteps:
    found = yield call("search_projects", query="Hidden Prism Project")
    risks = yield call("risks_for_project", project_id=found[0]["id"])
    return sum(r["impact"] for r in risks if r["status"] == "open")


def _tracking() -> PlanSteps:
    found = yield call("search_shipments", query="Golden Raven Parcel")
    events = yield call("tracking_events_for_shipment", shipment_id=found[0]["id"])
    return sum(1 for e in events if e["status"] == "exception")


def _payments() -> PlanSteps:
    found = yield call("search_invoices", query="Amber Willow Invoice")
    payments = yield call("payments_for_invoice", invoice_id=found[0]["id"])
    return sum(p["amount"] for p in payments if p["status"] == "settled")


def _department_leave() -> PlanSteps:
    found = yield call("search_departments", query="Quiet Orbit Team")
    staff = yield call("employees_for_department", department_id=found[0]["id"])
    requests = yield [call("leave_requests_for_employee", employee_id=e["id"]) for e in staff]
    return sum(r["days"] for rs in requests for r in rs if r["status"] == "pending")


def _room_minutes() -> PlanSteps:
    found = yield call("search_rooms", query="Hidden Comet Room")
    meetings = yield call("meetings_for_room", room_id=found[0]["id"])
    return sum(m["duration_minutes"] for m in meetings if m["status"] == "scheduled")


def _building_seats() -> PlanSteps:
    found = yield call("search_buildings", query="Crimson Ember House")
    rooms = yield call("rooms_for_building", building_id=found[0]["id"])
    return sum(r["seats"] for r in rooms if r["status"] == "bookable")


def _survey_rating() -> PlanSteps:
    found = yield call("search_tickets", query="Misty River Ticket")
    responses = yield call("survey_responses_for_ticket", ticket_id=found[0]["id"])
    return round(sum(r["rating"] for r in responses) / len(responses), 2)


def _ticket_priority() -> PlanSteps:
    found = yield call("search_customers", query="Polaris Logistics")
    tickets = yield call("tickets_for_customer", customer_id=found[0]["id"])
    return max(t["priority_score"] for t in tickets if t["status"] != "solved")


def _deal_notes() -> PlanSteps:
    found = yield call("search_deals", query="Quiet Meadow Deal")
    notes = yield call("sales_notes_for_deal", deal_id=found[0]["id"])
    return sum(n["words"] for n in notes if n["status"] == "final")


def _off_track_kpis() -> PlanSteps:
    found = yield call("search_dashboards", query="Velvet Willow Board")
    kpis = yield call("kpis_for_dashboard", dashboard_id=found[0]["id"])
    return sorted(k["name"] for k in kpis if k["status"] == "off_track")


def _reimbursed() -> PlanSteps:
    found = yield call("search_employees", query="Ada Duarte")
    expenses = yield call("expenses_for_employee", employee_id=found[0]["id"])
    return sum(e["amount"] for e in expenses if e["status"] == "reimbursed")


def _unpaid_bills() -> PlanSteps:
    found = yield call("search_suppliers", query="Redstone Textiles")
    bills = yield call("vendor_bills_for_supplier", supplier_id=found[0]["id"])
    return sum(b["amount"] for b in bills if b["status"] != "paid")


def _budget_minus_payroll() -> PlanSteps:
    found = yield call("search_departments", query="Azure Comet Team")
    budgets, payrolls = yield [call("budgets_for_department", department_id=found[0]["id"]),
                               call("payroll_runs_for_department", department_id=found[0]["id"])]
    approved = sum(b["amount"] for b in budgets if b["status"] == "approved")
    return approved - sum(p["gross_total"] for p in payrolls if p["status"] == "completed")


def _alerts_firing() -> PlanSteps:
    found = yield call("search_servers", query="harbor-12")
    incidents = yield call("incidents_for_server", server_id=found[0]["id"])
    alerts = yield [call("alerts_for_incident", incident_id=i["id"]) for i in incidents]
    return sum(1 for group in alerts for a in group if a["status"] == "firing")


def _qualified_leads() -> PlanSteps:
    found = yield call("search_campaigns", query="Rapid Ember Campaign")
    leads = yield call("leads_for_campaign", campaign_id=found[0]["id"])
    return sum(1 for lead in leads if lead["status"] == "qualified")


def _active_project_budget() -> PlanSteps:
    found = yield call("search_customers", query="Redstone Media")
    projects = yield call("projects_for_customer", customer_id=found[0]["id"])
    return sum(p["budget"] for p in projects if p["status"] == "active")


def _overdue_customers() -> PlanSteps:
    invoices = yield call("list_invoices", status="overdue")
    customers = yield [call("get_customer", customer_id=i["customer_id"]) for i in invoices]
    return sorted({c["name"] for c in customers})


def _manager_budget() -> PlanSteps:
    found = yield call("search_customers", query="Brightwater Foods")
    manager = yield call("get_employee", employee_id=found[0]["employee_id"])
    department, budgets = yield [call("get_department", department_id=manager["department_id"]),
                                 call("budgets_for_department", department_id=manager["department_id"])]
    return {"department": department["name"],
            "approved_budget": sum(b["amount"] for b in budgets if b["status"] == "approved")}


def _shipment_customer_tickets() -> PlanSteps:
    found = yield call("search_shipments", query="Velvet Willow Parcel")
    customer = yield call("get_customer", customer_id=found[0]["customer_id"])
    tickets, invoices = yield [call("tickets_for_customer", customer_id=customer["id"]),
                               call("invoices_for_customer", customer_id=customer["id"])]
    returns = yield call("return_requests_for_shipment", shipment_id=found[0]["id"])
    return {"customer": customer["name"],
            "unsolved_tickets": sum(1 for t in tickets if t["status"] != "solved"),
            "unpaid_invoices": sum(1 for i in invoices if i["status"] != "paid"),
            "returns": len(returns)}


_TASKS: list[tuple[str, str, Plan, str]] = [
    ("customer-overdue-total", "Look up the customer Quartz Textiles in the CRM and list the invoices billed to that "
     "customer. What is the total amount in EUR of its overdue invoices?", _overdue_total, "numeric"),
    ("account-manager-department", "The customer Harbor Works has an account manager (an employee). Find the customer, "
     "get that employee, then get the department the employee works in. Answer with the department's name.",
     _manager_department, "exact"),
    ("supplier-active-products", "Search the supplier Harbor Robotics and list the products it supplies. Which of "
     "those products are still active? Answer with their names as a sorted list.", _supplier_products, "exact"),
    ("server-unresolved-incidents", "Search for the server named harbor-12 and list the incidents on that server. How "
     "many of its incidents are not resolved yet?", _server_incidents, "numeric"),
    ("certificate-days-left", "Search for the server ember-19 and list the TLS certificates installed on it. How many "
     "days are left before the first of them expires (the smallest days left)?", _certificates, "numeric"),
    ("campaign-best-coupon", "Search the marketing campaign named 'Lunar Pine Campaign' and list its coupons. What is "
     "the highest discount percent among the coupons that are still valid?", _coupons, "numeric"),
    ("project-open-risks", "Search the project 'Hidden Prism Project' and list the risks of that project. What is the "
     "total impact score of its risks that are still open?", _risks, "numeric"),
    ("shipment-exceptions", "Search the shipment 'Golden Raven Parcel' and list the tracking events (scans) of that "
     "shipment. How many of the tracking events are exceptions?", _tracking, "numeric"),
    ("invoice-settled-payments", "Search the invoice 'Amber Willow Invoice' and list the payments received for that "
     "invoice. What is the total amount of its settled payments?", _payments, "numeric"),
    ("department-pending-leave", "Search the department 'Quiet Orbit Team', list the employees of that department, "
     "then list the leave requests of each employee. How many days of leave are pending in total?",
     _department_leave, "numeric"),
    ("room-scheduled-minutes", "Search the meeting room 'Hidden Comet Room' and list the meetings in that room. How "
     "many minutes of scheduled meetings does the room have in total?", _room_minutes, "numeric"),
    ("building-bookable-seats", "Search the building 'Crimson Ember House' and list the rooms in that building. How "
     "many seats do its bookable rooms have in total?", _building_seats, "numeric"),
    ("ticket-survey-rating", "Search the support ticket 'Misty River Ticket' and list the survey responses for that "
     "ticket. What is their average satisfaction rating, rounded to 2 decimals?", _survey_rating, "numeric"),
    ("customer-ticket-priority", "Search the customer Polaris Logistics and list the support tickets of that "
     "customer. What is the highest priority score among its tickets that are not solved?", _ticket_priority,
     "numeric"),
    ("deal-final-notes", "Search the deal 'Quiet Meadow Deal' and list the sales notes written about that deal. How "
     "many words do its final sales notes have in total?", _deal_notes, "numeric"),
    ("dashboard-off-track-kpis", "Search the dashboard 'Velvet Willow Board' and list the KPIs on that dashboard. "
     "Which KPIs are off track? Answer with their names as a sorted list.", _off_track_kpis, "exact"),
    ("employee-reimbursed-expenses", "Search the employee Ada Duarte and list the expenses that employee claimed. "
     "What is the total amount of the expenses already reimbursed?", _reimbursed, "numeric"),
    ("supplier-unpaid-bills", "Search the supplier Redstone Textiles and list the vendor bills that supplier sent "
     "us. What is the total amount of the bills that are not paid yet?", _unpaid_bills, "numeric"),
    ("department-budget-after-payroll", "Search the department 'Azure Comet Team', then list the budgets of that "
     "department and the payroll runs of that department. What is the approved budget amount minus the gross total "
     "of the completed payroll runs?", _budget_minus_payroll, "numeric"),
    ("server-firing-alerts", "Search the server harbor-12, list the incidents on that server, then list the "
     "monitoring alerts of each incident. How many of those alerts are firing?", _alerts_firing, "numeric"),
    ("campaign-qualified-leads", "Search the campaign 'Rapid Ember Campaign' and list the leads that came from that "
     "campaign. How many of the leads are qualified?", _qualified_leads, "numeric"),
    ("customer-active-project-budget", "Search the customer Redstone Media and list the projects we deliver for "
     "that customer. What is the total budget of its active projects?", _active_project_budget, "numeric"),
    ("overdue-invoice-customers", "List the invoices whose status is overdue, then get the customer of each of "
     "those invoices. Which customers have overdue invoices? Answer with their names as a sorted list without "
     "duplicates.", _overdue_customers, "exact"),
    ("manager-department-budget", "The customer Brightwater Foods has an account manager (an employee). Search the "
     "customer, get the employee, then get that employee's department and list the budgets of the department. "
     "Answer with a dict: {'department': the department's name, 'approved_budget': the total amount of its approved "
     "budgets}.", _manager_budget, "exact"),
    ("shipment-customer-overview", "Search the shipment 'Velvet Willow Parcel' and get the customer it was sent to. "
     "List that customer's support tickets and invoices, and the return requests for the shipment. Answer with a "
     "dict: {'customer': name, 'unsolved_tickets': tickets not solved, 'unpaid_invoices': invoices not paid, "
     "'returns': number of return requests}.", _shipment_customer_tickets, "exact"),
]


def expected_of(plan: Plan) -> Any:
    """A plan's answer computed directly on the world's data (what the servers would answer)."""
    gen = plan()
    sent: Any = None
    while True:
        try:
            request = gen.send(sent)
        except StopIteration as stop:
            return stop.value
        group = request if isinstance(request, (list, tuple)) else [request]
        values = [world.call_tool(c.name, *c.args, **c.kwargs) for c in group]
        sent = values if isinstance(request, (list, tuple)) else values[0]


def needed_tools(plan: Plan) -> list[str]:
    """The tools a plan calls, in order of first use (for the search-quality measure)."""
    gen = plan()
    sent: Any = None
    names: list[str] = []
    while True:
        try:
            request = gen.send(sent)
        except StopIteration:
            return names
        group = request if isinstance(request, (list, tuple)) else [request]
        names.extend(c.name for c in group if c.name not in names)
        values = [world.call_tool(c.name, *c.args, **c.kwargs) for c in group]
        sent = values if isinstance(request, (list, tuple)) else values[0]


#: Each task's tools, by task id.
NEEDED: dict[str, list[str]] = {task_id: needed_tools(plan) for task_id, _, plan, _ in _TASKS}


def tasks() -> list[Task]:
    return [Task(id=task_id, instruction=instruction, tools=make_tools, expected=expected_of(plan), check=check,
                 max_turns=6, tags=("many-tools", f"tools:{len(NEEDED[task_id])}"), oracle=Oracle(plan))
            for task_id, instruction, plan, check in _TASKS]
