"""The ``many-tools`` suite's world: 12 business systems, 60 kinds of records, 360 tools. Deterministic.

Each *domain* (``crm``, ``billing``, ``inventory``, ...) is one MCP server
(:mod:`.many_tools_server`). It keeps five kinds of records (*entities*),
and offers six tools per entity: ``list_<plural>``, ``get_<singular>``,
``search_<plural>``, ``count_<plural>_by_status``, ``<plural>_for_<ref>``
(the records that point at one record of another entity, often in another
domain: invoices for a customer) and ``total_<metric>_of_<plural>``.

All data is generated from SHA-256 of names, so every machine and Python
version sees the same records; nothing is random and nothing is downloaded.
The suite computes its expected answers with the same functions the
servers run (:func:`call_tool`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

#: Records per entity.
RECORDS = 12


@dataclass(frozen=True)
class Entity:
    """One kind of record in a domain."""

    singular: str
    plural: str
    prefix: str  # id prefix: CUS-1003
    about: str  # what it is, for the tools' descriptions
    statuses: tuple[str, ...]
    metric: str  # the numeric field
    metric_about: str
    low: float
    high: float
    ref: str  # the singular of the entity its records point at
    names: str  # name style: company, person, or a word for "<Adjective> <Noun> <word>"

    @property
    def ref_field(self) -> str:
        return f"{self.ref}_id"


@dataclass(frozen=True)
class Domain:
    name: str
    about: str
    entities: tuple[Entity, ...]


def _e(singular: str, plural: str, prefix: str, about: str, statuses: str, metric: str, metric_about: str,
       low: float, high: float, ref: str, names: str) -> Entity:
    return Entity(singular, plural, prefix, about, tuple(statuses.split()), metric, metric_about, low, high, ref,
                  names)


DOMAINS: tuple[Domain, ...] = (
    Domain("crm", "Customer relationship management: customers, their contacts, deals, leads and sales notes.", (
        _e("customer", "customers", "CUS", "companies that buy from us", "active prospect churned", "lifetime_value",
           "lifetime value in EUR", 1_000, 90_000, "employee", "company"),
        _e("contact", "contacts", "CON", "people we talk to at customer companies", "active inactive", "score",
           "engagement score from 0 to 100", 0, 100, "customer", "person"),
        _e("deal", "deals", "DEA", "sales opportunities with customers", "open won lost", "value",
           "expected deal value in EUR", 500, 50_000, "customer", "Deal"),
        _e("lead", "leads", "LEA", "potential customers from marketing", "new qualified disqualified", "score",
           "lead score from 0 to 100", 0, 100, "campaign", "person"),
        _e("sales_note", "sales_notes", "SNO", "notes the sales team wrote about deals", "draft final", "words",
           "length in words", 20, 800, "deal", "Note"),
    )),
    Domain("billing", "Billing and payments: invoices, payments, refunds, subscriptions and credit notes.", (
        _e("invoice", "invoices", "INV", "bills sent to customers", "paid unpaid overdue", "amount",
           "invoice amount in EUR", 100, 9_000, "customer", "Invoice"),
        _e("payment", "payments", "PAY", "money received for invoices", "settled pending failed", "amount",
           "payment amount in EUR", 50, 9_000, "invoice", "Payment"),
        _e("refund", "refunds", "REF", "money paid back to customers", "issued requested rejected", "amount",
           "refund amount in EUR", 10, 2_000, "payment", "Refund"),
        _e("subscription", "subscriptions", "SUB", "recurring plans customers pay for", "active paused cancelled",
           "monthly_fee", "monthly fee in EUR", 20, 2_000, "customer", "Plan"),
        _e("credit_note", "credit_notes", "CRN", "credits granted against invoices", "open applied", "amount",
           "credit amount in EUR", 10, 1_500, "invoice", "Credit"),
    )),
    Domain("inventory", "Inventory and purchasing: products, warehouses, stock, suppliers and purchase orders.", (
        _e("product", "products", "PRD", "items we sell", "active discontinued", "unit_price",
           "unit price in EUR", 2, 900, "supplier", "Product"),
        _e("warehouse", "warehouses", "WHS", "storage sites", "open closed", "capacity", "capacity in pallets",
           100, 5_000, "employee", "Depot"),
        _e("stock_item", "stock_items", "STK", "quantities of products held in stock", "available reserved damaged",
           "quantity", "units in stock", 0, 500, "product", "Lot"),
        _e("supplier", "suppliers", "SUP", "companies we buy products from", "approved probation blocked",
           "rating", "supplier rating from 1 to 5", 1, 5, "employee", "company"),
        _e("purchase_order", "purchase_orders", "POR", "orders we placed with suppliers", "draft sent received",
           "total", "order total in EUR", 200, 40_000, "supplier", "Order"),
    )),
    Domain("hr", "Human resources: employees, departments, leave requests, payroll runs and job postings.", (
        _e("employee", "employees", "EMP", "people who work here", "active on_leave left", "salary",
           "yearly salary in EUR", 30_000, 140_000, "department", "person"),
        _e("department", "departments", "DEP", "organisational units", "active merged", "headcount",
           "number of people", 3, 120, "employee", "Team"),
        _e("leave_request", "leave_requests", "LVR", "requests for days off", "approved pending rejected", "days",
           "days of leave asked for", 1, 25, "employee", "Leave"),
        _e("payroll_run", "payroll_runs", "PRR", "monthly salary payments per department", "completed scheduled",
           "gross_total", "gross total paid in EUR", 10_000, 900_000, "department", "Payroll"),
        _e("job_posting", "job_postings", "JOB", "open positions we advertise", "open filled closed", "applicants",
           "number of applicants", 0, 300, "department", "Role"),
    )),
    Domain("support", "Customer support: tickets, support agents, SLA policies, ticket comments and surveys.", (
        _e("ticket", "tickets", "TCK", "problems customers reported", "open pending solved", "priority_score",
           "priority score from 1 to 10", 1, 10, "customer", "Ticket"),
        _e("support_agent", "support_agents", "AGT", "people who answer tickets", "online offline", "solved_count",
           "tickets solved this month", 0, 400, "department", "person"),
        _e("sla_policy", "sla_policies", "SLA", "response-time promises attached to subscriptions", "active retired",
           "response_hours", "hours allowed for a first response", 1, 72, "subscription", "Policy"),
        _e("ticket_comment", "ticket_comments", "TCM", "messages written on tickets", "public internal", "length",
           "length in characters", 10, 3_000, "ticket", "Comment"),
        _e("survey_response", "survey_responses", "SUR", "satisfaction ratings after tickets", "submitted partial",
           "rating", "satisfaction rating from 1 to 5", 1, 5, "ticket", "Survey"),
    )),
    Domain("shipping", "Shipping and logistics: shipments, carriers, tracking events, delivery zones and returns.", (
        _e("shipment", "shipments", "SHP", "parcels sent to customers", "in_transit delivered delayed", "weight_kg",
           "weight in kilograms", 0.5, 800, "customer", "Parcel"),
        _e("carrier", "carriers", "CAR", "transport companies that deliver shipments", "contracted suspended",
           "on_time_rate", "share of deliveries on time, in percent", 60, 100, "employee", "company"),
        _e("tracking_event", "tracking_events", "TRK", "scans of a shipment on its way", "scanned exception",
           "hub_number", "number of the hub that scanned it", 1, 99, "shipment", "Scan"),
        _e("delivery_zone", "delivery_zones", "ZON", "areas a carrier serves", "served paused", "base_rate",
           "base delivery rate in EUR", 2, 60, "carrier", "Zone"),
        _e("return_request", "return_requests", "RET", "customers sending shipments back", "requested received "
           "refunded", "items", "number of items returned", 1, 20, "shipment", "Return"),
    )),
    Domain("calendar", "Calendars and facilities: meetings, rooms, buildings, reminders and holidays.", (
        _e("meeting", "meetings", "MTG", "scheduled meetings", "scheduled cancelled done", "duration_minutes",
           "length in minutes", 15, 240, "room", "Meeting"),
        _e("room", "rooms", "ROM", "meeting rooms", "bookable maintenance", "seats", "number of seats", 2, 60,
           "building", "Room"),
        _e("building", "buildings", "BLD", "office buildings", "open renovation", "floors", "number of floors", 1, 30,
           "employee", "House"),
        _e("reminder", "reminders", "RMD", "alerts set for meetings", "pending sent", "minutes_before",
           "minutes before the meeting", 5, 1_440, "meeting", "Reminder"),
        _e("holiday", "holidays", "HOL", "days off for a department", "confirmed tentative", "days",
           "length in days", 1, 5, "department", "Holiday"),
    )),
    Domain("projects", "Project management: projects, project tasks, milestones, timesheets and risks.", (
        _e("project", "projects", "PRJ", "client projects we deliver", "active on_hold completed", "budget",
           "project budget in EUR", 5_000, 500_000, "customer", "Project"),
        _e("project_task", "project_tasks", "PTK", "work items inside projects", "todo doing done", "estimate_hours",
           "estimated effort in hours", 1, 80, "project", "Task"),
        _e("milestone", "milestones", "MIL", "project checkpoints with due dates", "upcoming reached missed",
           "completion", "completion in percent", 0, 100, "project", "Milestone"),
        _e("timesheet", "timesheets", "TMS", "hours employees logged", "submitted approved", "hours",
           "hours logged", 1, 60, "employee", "Week"),
        _e("risk", "risks", "RSK", "things that could go wrong in projects", "open mitigated closed", "impact",
           "impact score from 1 to 25", 1, 25, "project", "Risk"),
    )),
    Domain("marketing", "Marketing: campaigns, newsletters, audience segments, adverts and coupons.", (
        _e("campaign", "campaigns", "CMP", "marketing campaigns", "planned running finished", "spend",
           "money spent in EUR", 500, 80_000, "employee", "Campaign"),
        _e("newsletter", "newsletters", "NWS", "e-mail newsletters sent for campaigns", "draft sent", "open_rate",
           "share of recipients who opened it, in percent", 5, 70, "campaign", "Letter"),
        _e("audience_segment", "audience_segments", "AUD", "groups of people a campaign targets", "active archived",
           "size", "number of people", 100, 90_000, "campaign", "Segment"),
        _e("advert", "adverts", "ADV", "paid ads of campaigns", "live paused ended", "clicks", "number of clicks",
           0, 20_000, "campaign", "Ad"),
        _e("coupon", "coupons", "CPN", "discount codes of campaigns", "valid expired", "discount_percent",
           "discount in percent", 5, 50, "campaign", "Coupon"),
    )),
    Domain("analytics", "Analytics: dashboards, KPIs, reports, web sessions and conversion funnels.", (
        _e("dashboard", "dashboards", "DSH", "collections of charts", "published draft", "views",
           "views this month", 0, 5_000, "employee", "Board"),
        _e("kpi", "kpis", "KPI", "key performance indicators on dashboards", "on_track at_risk off_track",
           "current_value", "current value of the indicator", 0, 1_000, "dashboard", "Indicator"),
        _e("report", "reports", "RPT", "scheduled analytics reports", "scheduled paused", "pages",
           "number of pages", 1, 80, "dashboard", "Report"),
        _e("web_session", "web_sessions", "WSS", "visits of customers to our website", "converted bounced",
           "pages_viewed", "pages viewed in the visit", 1, 60, "customer", "Visit"),
        _e("funnel", "funnels", "FNL", "conversion funnels of campaigns", "active archived", "conversion_rate",
           "conversion rate in percent", 0.5, 30, "campaign", "Funnel"),
    )),
    Domain("devops", "Infrastructure: servers, deployments, incidents, monitoring alerts and TLS certificates.", (
        _e("server", "servers", "SRV", "machines that run our services", "running stopped degraded", "cpu_load",
           "CPU load in percent", 1, 100, "employee", "node"),
        _e("deployment", "deployments", "DPL", "releases rolled out to servers", "succeeded failed rolled_back",
           "duration_seconds", "how long the rollout took, in seconds", 10, 3_600, "server", "Release"),
        _e("incident", "incidents", "INC", "outages and production problems", "open investigating resolved",
           "severity", "severity from 1 (worst) to 5", 1, 5, "server", "Incident"),
        _e("alert", "alerts", "ALR", "monitoring alerts raised for incidents", "firing acknowledged silenced",
           "threshold", "the threshold that was crossed", 1, 100, "incident", "Alert"),
        _e("certificate", "certificates", "CRT", "TLS certificates installed on servers", "valid expiring expired",
           "days_left", "days until the certificate expires", 0, 365, "server", "Cert"),
    )),
    Domain("finance", "Finance and accounting: budgets, expenses, vendor bills, ledger entries and tax filings.", (
        _e("budget", "budgets", "BGT", "money departments may spend this year", "approved draft", "amount",
           "budget amount in EUR", 10_000, 2_000_000, "department", "Budget"),
        _e("expense", "expenses", "EXP", "costs employees claim back", "submitted approved reimbursed", "amount",
           "expense amount in EUR", 5, 3_000, "employee", "Expense"),
        _e("vendor_bill", "vendor_bills", "VBL", "bills suppliers sent us", "received approved paid", "amount",
           "bill amount in EUR", 100, 60_000, "supplier", "Bill"),
        _e("ledger_entry", "ledger_entries", "LED", "bookings in the general ledger for invoices", "posted reversed",
           "amount", "booked amount in EUR", 100, 9_000, "invoice", "Entry"),
        _e("tax_filing", "tax_filings", "TAX", "tax returns filed per department", "filed due late", "tax_due",
           "tax due in EUR", 0, 120_000, "department", "Filing"),
    )),
)

ENTITIES: dict[str, Entity] = {e.singular: e for d in DOMAINS for e in d.entities}
DOMAIN_OF: dict[str, str] = {e.singular: d.name for d in DOMAINS for e in d.entities}

_COMPANY_A = ("Nordwind", "Bluefin", "Silverline", "Oakridge", "Harbor", "Quartz", "Evergreen", "Redstone",
              "Summit", "Lumen", "Copperfield", "Brightwater", "Ironbark", "Meadow", "Polaris", "Cedar")
_COMPANY_B = ("Traders", "Logistics", "Foods", "Analytics", "Textiles", "Robotics", "Pharma", "Studios",
              "Energy", "Outfitters", "Systems", "Partners", "Labs", "Motors", "Media", "Works")
_FIRST = ("Ada", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal",
          "Lena", "Mateo", "Nadia", "Oskar", "Priya")
_LAST = ("Novak", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Kowalski", "Haddad", "Fischer",
         "Rossi", "Nguyen", "Brennan", "Costa", "Weber", "Sato", "Duarte")
_ADJ = ("Amber", "Azure", "Brisk", "Crimson", "Golden", "Hidden", "Jade", "Lunar", "Misty", "Northern",
        "Quiet", "Rapid", "Scarlet", "Solar", "Velvet", "Wild")
_NOUN = ("Falcon", "Harbor", "Maple", "Orbit", "Pine", "River", "Comet", "Delta", "Ember", "Glacier",
         "Lotus", "Meadow", "Prism", "Raven", "Tundra", "Willow")


def _h(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


def _name(entity: Entity, i: int) -> str:
    seed = _h("name", entity.singular) % 16
    a, b = (i + seed) % 16, (i * 5 + seed * 3 + 1) % 16
    if entity.names == "company":
        return f"{_COMPANY_A[a]} {_COMPANY_B[b]}"
    if entity.names == "person":
        return f"{_FIRST[a]} {_LAST[b]}"
    if entity.names == "node":
        return f"{_NOUN[a].lower()}-{10 + i:02d}"
    return f"{_ADJ[a]} {_NOUN[b]} {entity.names}"


@lru_cache(maxsize=None)
def records(singular: str) -> tuple[dict[str, Any], ...]:
    """The records of one entity (fresh dicts are handed out by :func:`call_tool`)."""
    e = ENTITIES[singular]
    ref = ENTITIES[e.ref]
    out = []
    for i in range(RECORDS):
        h = _h(e.singular, i)
        span = e.high - e.low
        raw = e.low + (h % 10_000) / 10_000 * span
        value: float | int = round(raw) if float(e.low).is_integer() and float(e.high).is_integer() else round(raw, 2)
        out.append({
            "id": f"{e.prefix}-{1001 + i}",
            "name": _name(e, i),
            "status": e.statuses[(h >> 16) % len(e.statuses)],
            e.metric: value,
            e.ref_field: f"{ref.prefix}-{1001 + (h >> 24) % RECORDS}",
            "created": f"2025-{1 + (h >> 32) % 12:02d}-{1 + (h >> 40) % 28:02d}",
        })
    return tuple(out)


# --------------------------------------------------------------------------- the tools


@dataclass(frozen=True)
class ToolSpec:
    """One tool of a domain's server: its name, description, parameters and how it answers."""

    name: str
    description: str
    params: tuple[tuple[str, str, str, Any], ...]  # (name, type: str|int|optional-str, description, default)
    returns: str  # "record", "records", "counts", "number"
    entity: str
    verb: str


def tool_specs(domain: Domain) -> list[ToolSpec]:
    """The six tools of each of ``domain``'s entities, in a fixed order.

    A description's first line says what the tool does (search results show
    it); a second paragraph lists the record's fields (the code needs them).
    """
    specs = []
    for e in domain.entities:
        ref = ENTITIES[e.ref]
        what, ref_what = e.singular.replace("_", " "), ref.singular.replace("_", " ")
        statuses = ", ".join(e.statuses)
        fields = (f"\n\nEach {what} has: id, name, status ({statuses}), {e.metric} ({e.metric_about}), "
                  f"{e.ref_field} (its {ref_what}) and created (a date).")
        status_param = ("status", "optional-str", f"only {e.plural.replace('_', ' ')} with this status: one of "
                        f"{statuses}", None)
        specs += [
            ToolSpec(f"list_{e.plural}", f"List {e.plural.replace('_', ' ')} ({e.about}), optionally only those "
                     f"with one status.{fields}",
                     (status_param, ("limit", "int", "most records to return", 50)), "records", e.singular, "list"),
            ToolSpec(f"get_{e.singular}", f"Get one {what} by its id.{fields}",
                     ((f"{e.singular}_id", "str", f"the {what}'s id, e.g. {e.prefix}-1001", ...),), "record",
                     e.singular, "get"),
            ToolSpec(f"search_{e.plural}", f"Find {e.plural.replace('_', ' ')} by name (search or look up by part "
                     f"of the name); returns the matches with their ids.{fields}",
                     (("query", "str", "part of the name", ...),), "records", e.singular, "search"),
            ToolSpec(f"count_{e.plural}_by_status", f"Count {e.plural.replace('_', ' ')} per status ({statuses}).",
                     (), "counts", e.singular, "count"),
            ToolSpec(f"{e.plural}_for_{e.ref}", f"List the {e.plural.replace('_', ' ')} of one {ref_what} (by the "
                     f"{ref_what}'s id, from the {DOMAIN_OF[ref.singular]} system).{fields}",
                     ((e.ref_field, "str", f"the {ref_what}'s id, e.g. {ref.prefix}-1001", ...),), "records",
                     e.singular, "for"),
            ToolSpec(f"total_{e.metric}_of_{e.plural}", f"Total {e.metric_about} of all "
                     f"{e.plural.replace('_', ' ')}, or of those with one status.", (status_param,), "number",
                     e.singular, "total"),
        ]
    return specs


def domain(name: str) -> Domain:
    for d in DOMAINS:
        if d.name == name:
            return d
    raise KeyError(f"no domain {name!r}; the domains are {', '.join(d.name for d in DOMAINS)}")


@lru_cache(maxsize=None)
def _specs_by_name() -> dict[str, ToolSpec]:
    return {s.name: s for d in DOMAINS for s in tool_specs(d)}


def call_tool(name: str, **arguments: Any) -> Any:
    """Run tool ``name`` on the world's data (what the servers answer; the suite's expected values)."""
    spec = _specs_by_name()[name]
    e = ENTITIES[spec.entity]
    rows = [dict(r) for r in records(e.singular)]
    if spec.verb == "list":
        status = arguments.get("status")
        hits = [r for r in rows if status in (None, "", r["status"])]
        return hits[: int(arguments.get("limit", 50))]
    if spec.verb == "get":
        wanted = arguments[f"{e.singular}_id"]
        for r in rows:
            if r["id"] == wanted:
                return r
        raise KeyError(f"no {e.singular.replace('_', ' ')} with id {wanted!r}")
    if spec.verb == "search":
        query = str(arguments["query"]).strip().lower()
        return [r for r in rows if query and query in r["name"].lower()]
    if spec.verb == "count":
        counts = {s: 0 for s in e.statuses}
        for r in rows:
            counts[r["status"]] += 1
        return counts
    if spec.verb == "for":
        return [r for r in rows if r[e.ref_field] == arguments[e.ref_field]]
    status = arguments.get("status")
    return round(sum(r[e.metric] for r in rows if status in (None, "", r["status"])), 2)


def all_tool_names() -> list[str]:
    return list(_specs_by_name())
