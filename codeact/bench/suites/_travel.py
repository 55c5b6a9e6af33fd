"""Offline travel data: flights, weather forecasts, cities and hotels."""

from __future__ import annotations

from typing import Any

from ...tools import tool
from .._task import TaskContext

# (origin, destination, day) -> [(flight, depart, arrive, price EUR, stops)]
FLIGHTS: dict[tuple[str, str, str], list[tuple[str, str, str, float, int]]] = {
    ("Lisbon", "Paris", "friday"): [("TP432", "07:10", "10:40", 138.0, 0), ("AF1025", "12:30", "16:00", 121.0, 0),
                                    ("IB3101", "09:00", "14:55", 94.0, 1)],
    ("Lisbon", "Rome", "friday"): [("TP836", "08:15", "12:20", 149.0, 0), ("FR2201", "17:40", "21:45", 89.0, 0)],
    ("Lisbon", "Berlin", "friday"): [("TP538", "06:45", "11:10", 175.0, 0), ("LH1173", "10:05", "16:30", 102.0, 1),
                                     ("EW7597", "13:20", "17:45", 112.0, 0)],
    ("Lisbon", "Madrid", "friday"): [("IB3107", "07:00", "09:20", 64.0, 0), ("TP1024", "18:10", "20:30", 79.0, 0)],
    ("Lisbon", "Oslo", "friday"): [("SK1808", "11:00", "16:55", 211.0, 0), ("KL1692", "06:00", "13:40", 168.0, 1)],
    ("Lisbon", "Rome", "saturday"): [("TP838", "09:15", "13:20", 132.0, 0)],
    ("Rome", "Lisbon", "sunday"): [("TP837", "13:10", "15:20", 141.0, 0), ("FR2202", "22:20", "00:30", 77.0, 0)],
}

CITIES: dict[str, tuple[str, int, float]] = {  # country, population, UTC offset (hours, winter)
    "Lisbon": ("Portugal", 545_000, 0.0),
    "Paris": ("France", 2_102_000, 1.0),
    "Rome": ("Italy", 2_750_000, 1.0),
    "Berlin": ("Germany", 3_755_000, 1.0),
    "Madrid": ("Spain", 3_332_000, 1.0),
    "Oslo": ("Norway", 709_000, 1.0),
    "Athens": ("Greece", 643_000, 2.0),
    "Reykjavik": ("Iceland", 139_000, 0.0),
    "Dubai": ("United Arab Emirates", 3_604_000, 4.0),
    "New York": ("United States", 8_258_000, -5.0),
}

WEEK = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

# city -> one forecast per weekday: (high C, low C, rain chance %, sky)
FORECASTS: dict[str, list[tuple[int, int, int, str]]] = {
    "Paris": [(14, 7, 60, "rain"), (15, 8, 40, "cloudy"), (17, 9, 20, "sunny"), (16, 9, 25, "sunny"),
              (13, 6, 70, "rain"), (12, 5, 80, "rain"), (15, 7, 10, "sunny")],
    "Rome": [(19, 11, 10, "sunny"), (20, 12, 5, "sunny"), (18, 11, 35, "cloudy"), (21, 13, 10, "sunny"),
             (22, 13, 0, "sunny"), (23, 14, 15, "sunny"), (19, 12, 55, "rain")],
    "Berlin": [(11, 4, 50, "cloudy"), (9, 3, 65, "rain"), (12, 5, 30, "cloudy"), (13, 6, 20, "sunny"),
               (14, 6, 15, "sunny"), (10, 4, 45, "cloudy"), (8, 2, 70, "rain")],
    "Madrid": [(20, 9, 5, "sunny"), (21, 10, 0, "sunny"), (19, 9, 10, "sunny"), (18, 8, 40, "cloudy"),
               (20, 9, 5, "sunny"), (22, 11, 0, "sunny"), (21, 10, 10, "sunny")],
    "Oslo": [(6, -1, 40, "cloudy"), (5, -2, 55, "snow"), (7, 0, 30, "cloudy"), (8, 1, 20, "sunny"),
             (4, -3, 60, "snow"), (6, 0, 35, "cloudy"), (9, 2, 15, "sunny")],
    "Lisbon": [(19, 12, 20, "sunny"), (18, 12, 45, "cloudy"), (20, 13, 10, "sunny"), (21, 14, 5, "sunny"),
               (19, 13, 30, "cloudy"), (17, 12, 65, "rain"), (20, 13, 10, "sunny")],
}

# city -> [(hotel, price per night EUR)]
HOTELS = {
    "Rome": [("Albergo Sole", 96.0), ("Hotel Colosseo", 142.0), ("Trastevere Rooms", 88.5), ("Roma Centro", 120.0)],
    "Paris": [("Hotel du Nord", 131.0), ("Le Petit Lit", 99.0), ("Montmartre Inn", 112.0)],
    "Berlin": [("Spree Hostel", 54.0), ("Hotel Mitte", 98.0), ("Kreuzberg Suites", 87.0)],
}


def travel_tools(ctx: TaskContext) -> list[Any]:
    """Travel tools for one episode (read-only data)."""

    def city_key(city: str) -> str:
        for name in CITIES:
            if name.lower() == city.strip().lower():
                return name
        raise KeyError(f"unknown city {city!r}")

    @tool
    def search_flights(origin: str, destination: str, day: str) -> list[dict]:
        """Flights on a weekday: a list of {"flight", "depart", "arrive", "price" (EUR), "stops"}."""
        key = (city_key(origin), city_key(destination), day.strip().lower())
        return [{"flight": f, "depart": d, "arrive": a, "price": p, "stops": s}
                for f, d, a, p, s in FLIGHTS.get(key, [])]

    @tool
    def get_weather(city: str, day: str) -> dict:
        """The forecast for a city on a weekday: {"high", "low" (Celsius), "rain_chance" (%), "sky"}."""
        name = city_key(city)
        if name not in FORECASTS:
            raise KeyError(f"no forecast for {name}")
        d = day.strip().lower()
        if d not in WEEK:
            raise ValueError(f"day must be one of {', '.join(WEEK)}")
        high, low, rain, sky = FORECASTS[name][WEEK.index(d)]
        return {"high": high, "low": low, "rain_chance": rain, "sky": sky}

    @tool
    def city_info(city: str) -> tuple[str, int, float]:
        """A city's (country, population, UTC offset in hours)."""
        return CITIES[city_key(city)]

    @tool
    def hotel_prices(city: str, nights: int) -> list[tuple[str, float]]:
        """Hotels in a city and their total price in EUR for that many nights: [(hotel, total)]."""
        name = city_key(city)
        if nights < 1:
            raise ValueError("nights must be at least 1")
        return [(h, round(p * nights, 2)) for h, p in HOTELS.get(name, [])]

    return [search_flights, get_weather, city_info, hotel_prices]
