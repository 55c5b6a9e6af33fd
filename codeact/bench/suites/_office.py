"""An offline company directory: people, managers, meeting schedules and rooms."""

from __future__ import annotations

from typing import Any

from ...tools import tool
from .._task import TaskContext

# name -> (department, title, office, manager, start_year)
EMPLOYEES: dict[str, tuple[str, str, str, str | None, int]] = {
    "Helena Moreau": ("Executive", "CEO", "Lisbon", None, 2012),
    "Rui Tavares": ("Engineering", "VP Engineering", "Lisbon", "Helena Moreau", 2013),
    "Ana Lima": ("Engineering", "Engineer", "Lisbon", "Sofia Berg", 2019),
    "Sofia Berg": ("Engineering", "Engineering Manager", "Lisbon", "Rui Tavares", 2015),
    "Tom Hale": ("Engineering", "Engineer", "Berlin", "Sofia Berg", 2020),
    "Kenji Mori": ("Engineering", "Engineer", "Berlin", "Sofia Berg", 2021),
    "Lucia Neri": ("Data", "Data Lead", "Berlin", "Rui Tavares", 2016),
    "Omar Haddad": ("Data", "Data Scientist", "Berlin", "Lucia Neri", 2020),
    "Eva Novak": ("Data", "Data Engineer", "Lisbon", "Lucia Neri", 2022),
    "Paul Weber": ("Sales", "Sales Director", "Berlin", "Helena Moreau", 2014),
    "Nina Costa": ("Sales", "Account Executive", "Lisbon", "Paul Weber", 2018),
    "Jonas Lind": ("Sales", "Account Executive", "Berlin", "Paul Weber", 2019),
    "Marta Reis": ("Design", "Design Lead", "Lisbon", "Helena Moreau", 2017),
    "Leo Park": ("Design", "Designer", "Lisbon", "Marta Reis", 2023),
}

DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday")

# (name, day) -> [(start, end, title)]
SCHEDULES: dict[tuple[str, str], list[tuple[str, str, str]]] = {
    ("Ana Lima", "tuesday"): [("09:00", "09:30", "Standup"), ("11:00", "12:00", "Design review"),
                              ("15:00", "15:30", "1:1")],
    ("Tom Hale", "tuesday"): [("09:00", "09:30", "Standup"), ("10:00", "11:00", "Pairing"),
                              ("13:00", "14:00", "Planning"), ("16:00", "16:30", "Demo")],
    ("Kenji Mori", "tuesday"): [("09:00", "09:30", "Standup"), ("14:00", "15:00", "Interview")],
    ("Sofia Berg", "tuesday"): [("09:00", "09:30", "Standup"), ("10:00", "10:30", "1:1 Tom"),
                                ("15:00", "15:30", "1:1 Ana")],
    ("Rui Tavares", "tuesday"): [("10:00", "12:00", "Board prep")],
    ("Lucia Neri", "wednesday"): [("09:00", "10:00", "Data sync"), ("13:00", "14:00", "Roadmap")],
    ("Omar Haddad", "wednesday"): [("09:00", "10:00", "Data sync"), ("10:30", "11:30", "Model review"),
                                   ("15:00", "16:00", "Office hours")],
    ("Eva Novak", "wednesday"): [("09:00", "10:00", "Data sync"), ("11:30", "12:30", "Pipeline fix")],
    ("Paul Weber", "monday"): [("09:00", "10:30", "Forecast"), ("14:00", "15:00", "Client call")],
    ("Nina Costa", "monday"): [("09:30", "10:00", "Pipeline"), ("11:00", "12:30", "Client visit"),
                               ("16:00", "17:00", "Proposal")],
    ("Jonas Lind", "monday"): [("09:30", "10:00", "Pipeline"), ("13:00", "15:30", "Demo day")],
}

# office -> {room: capacity}
ROOMS = {
    "Lisbon": {"Tejo": 12, "Belem": 6, "Alfama": 20, "Graca": 4},
    "Berlin": {"Spree": 10, "Mitte": 16, "Kreuzberg": 8},
}


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def office_tools(ctx: TaskContext) -> list[Any]:
    """Directory tools for one episode (read-only data)."""

    def person(name: str) -> tuple[str, str, str, str | None, int]:
        if name not in EMPLOYEES:
            raise KeyError(f"no employee named {name!r}")
        return EMPLOYEES[name]

    def day_of(day: str) -> str:
        d = day.strip().lower()
        if d not in DAYS:
            raise ValueError(f"day must be one of {', '.join(DAYS)}")
        return d

    @tool
    def list_employees(department: str | None = None) -> list[str]:
        """Names of the employees, optionally of one department (Engineering, Data, Sales, Design, Executive)."""
        return [n for n, e in EMPLOYEES.items() if department is None or e[0] == department]

    @tool
    def get_employee(name: str) -> dict:
        """An employee's department, title, office, manager (None for the CEO) and start year."""
        dept, title, office, manager, start = person(name)
        return {"name": name, "department": dept, "title": title, "office": office, "manager": manager,
                "start_year": start}

    @tool
    def get_schedule(name: str, day: str) -> list[tuple[str, str, str]]:
        """An employee's meetings on a weekday: a list of (start, end, title), times as HH:MM."""
        person(name)
        return list(SCHEDULES.get((name, day_of(day)), []))

    @tool
    def find_common_free_slot(day: str, *names: str, minutes: int = 30) -> tuple[str, str] | None:
        """The earliest slot of `minutes` between 09:00 and 17:00 when everyone named is free.

        Returns (start, end) as HH:MM, or None when there is none.
        Example: find_common_free_slot("monday", "Ana Lima", "Tom Hale", minutes=60)
        """
        d = day_of(day)
        for n in names:
            person(n)
        busy = sorted((_minutes(s), _minutes(e)) for n in names for s, e, _ in SCHEDULES.get((n, d), []))
        start = _minutes("09:00")
        for b_start, b_end in busy:
            if b_start - start >= minutes:
                break
            start = max(start, b_end)
        if start + minutes > _minutes("17:00"):
            return None
        return _hhmm(start), _hhmm(start + minutes)

    @tool
    def list_rooms(office: str) -> list[str]:
        """Meeting rooms of an office (Lisbon or Berlin)."""
        if office not in ROOMS:
            raise KeyError(f"no office {office!r}; offices: {', '.join(ROOMS)}")
        return list(ROOMS[office])

    @tool
    def room_capacity(room: str) -> int:
        """How many people a meeting room seats."""
        for rooms in ROOMS.values():
            if room in rooms:
                return rooms[room]
        raise KeyError(f"no room named {room!r}")

    return [list_employees, get_employee, get_schedule, find_common_free_slot, list_rooms, room_capacity]
