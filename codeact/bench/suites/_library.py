"""An offline library: a catalogue, loans, members, and a few arithmetic helpers (variadic)."""

from __future__ import annotations

from typing import Any

from ...tools import tool
from .._task import TaskContext

# isbn -> (title, author, subject, year, pages, copies)
BOOKS: dict[str, tuple[str, str, str, int, int, int]] = {
    "978-0001": ("The Starry Vault", "Ada Byrne", "astronomy", 1998, 320, 3),
    "978-0002": ("Comets and Kings", "Ada Byrne", "history", 2004, 410, 2),
    "978-0003": ("Moons of the Outer Planets", "Chen Wei", "astronomy", 1987, 275, 1),
    "978-0004": ("Telescopes at Home", "Chen Wei", "astronomy", 2011, 190, 4),
    "978-0005": ("A Short History of Maps", "Ines Prado", "history", 1992, 350, 2),
    "978-0006": ("Empires of Salt", "Ines Prado", "history", 2015, 505, 1),
    "978-0007": ("The Quiet Garden", "Ola Nordmann", "gardening", 2009, 160, 5),
    "978-0008": ("Roses in Winter", "Ola Nordmann", "gardening", 2019, 210, 2),
    "978-0009": ("Light Years", "Ada Byrne", "astronomy", 2020, 288, 2),
    "978-0010": ("Sea Routes of the North", "Ines Prado", "history", 2001, 298, 3),
}

# isbn -> [(member id, due date)]
LOANS: dict[str, list[tuple[str, str]]] = {
    "978-0001": [("M-17", "2024-02-10"), ("M-04", "2024-03-05")],
    "978-0002": [("M-22", "2024-02-28")],
    "978-0003": [("M-04", "2024-02-15")],
    "978-0004": [],
    "978-0005": [("M-09", "2024-03-20"), ("M-31", "2024-02-02")],
    "978-0006": [("M-17", "2024-03-11")],
    "978-0007": [("M-12", "2024-02-20"), ("M-22", "2024-03-01"), ("M-09", "2024-02-25")],
    "978-0008": [],
    "978-0009": [("M-31", "2024-03-15"), ("M-12", "2024-03-02")],
    "978-0010": [("M-04", "2024-02-27"), ("M-40", "2024-03-30")],
}

MEMBERS = {
    "M-04": ("Bea Santos", "Porto"),
    "M-09": ("Carl Jensen", "Lisbon"),
    "M-12": ("Dora Klein", "Lisbon"),
    "M-17": ("Emil Weiss", "Braga"),
    "M-22": ("Fatima Nunes", "Porto"),
    "M-31": ("Gus Oliveira", "Lisbon"),
    "M-40": ("Hana Sato", "Coimbra"),
}


def library_tools(ctx: TaskContext) -> list[Any]:
    """Library tools for one episode (read-only data)."""

    def book(isbn: str) -> tuple[str, str, str, int, int, int]:
        if isbn not in BOOKS:
            raise KeyError(f"no book with ISBN {isbn}")
        return BOOKS[isbn]

    @tool
    def search_books(author: str | None = None, subject: str | None = None) -> list[str]:
        """ISBNs of the books by `author` and/or on `subject` (astronomy, history, gardening); all if neither."""
        return [isbn for isbn, b in BOOKS.items()
                if (author is None or b[1] == author) and (subject is None or b[2] == subject)]

    @tool
    def book_info(isbn: str) -> dict:
        """A book's title, author, subject, year, pages and number of copies the library owns."""
        title, author, subject, year, pages, copies = book(isbn)
        return {"isbn": isbn, "title": title, "author": author, "subject": subject, "year": year, "pages": pages,
                "copies": copies}

    @tool
    def loans_for(isbn: str) -> list[tuple[str, str]]:
        """The current loans of a book: a list of (member id, due date as YYYY-MM-DD)."""
        book(isbn)
        return list(LOANS.get(isbn, []))

    @tool
    def member_info(member_id: str) -> tuple[str, str]:
        """A member's (name, city)."""
        if member_id not in MEMBERS:
            raise KeyError(f"no member {member_id}")
        return MEMBERS[member_id]

    @tool
    def average(*values: float) -> float:
        """The mean of the given numbers, rounded to 2 decimals. Example: average(3, 4, 8)"""
        if not values:
            raise ValueError("average() needs at least one number")
        return round(sum(values) / len(values), 2)

    @tool
    def total(*values: float) -> float:
        """The sum of the given numbers. Example: total(3, 4, 8)"""
        return sum(values)

    return [search_books, book_info, loans_for, member_info, average, total]
