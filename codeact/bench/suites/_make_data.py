"""How the data-analysis suite's CSV files were made (deterministic; run it to rebuild them).

    python -m codeact.bench.suites._make_data

The files are committed; the suite's expected answers were computed from
them, so do not rebuild them without re-checking every task (the oracle
tests do that).
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import random
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"

REGIONS = [("North", "Ines Duarte", 30000), ("South", "Marco Rossi", 27000), ("East", "Yuki Tanaka", 35000),
           ("West", "Lena Vogel", 30500)]
PRODUCTS = [
    (101, "Trail Runner", "Footwear", 38.0, 89.0),
    (102, "City Sneaker", "Footwear", 25.0, 64.0),
    (103, "Rain Jacket", "Apparel", 41.0, 120.0),
    (104, "Fleece Top", "Apparel", 18.5, 55.0),
    (105, "Wool Socks", "Apparel", 3.2, 12.0),
    (106, "Day Pack", "Gear", 22.0, 70.0),
    (107, "Trekking Poles", "Gear", 15.0, 48.0),
    (108, "Headlamp", "Gear", 9.5, 32.0),
    (109, "Water Bottle", "Gear", 4.1, 16.0),
    (110, "Camp Stove", "Camping", 31.0, 95.0),
    (111, "Sleeping Mat", "Camping", 19.0, 60.0),
    (112, "Two-Person Tent", "Camping", 88.0, 240.0),
]
DEPARTMENTS = [("Engineering", 78000, 14000), ("Sales", 61000, 11000), ("Design", 66000, 9000),
               ("Support", 47000, 6000), ("Finance", 70000, 10000)]
FIRST = ["Ana", "Bruno", "Carla", "David", "Elena", "Filipe", "Greta", "Hugo", "Irene", "Jonas", "Kira", "Luis",
         "Marta", "Nuno", "Olga", "Pedro", "Quinn", "Rita", "Sven", "Tania"]
LAST = ["Silva", "Berg", "Costa", "Meyer", "Santos", "Novak", "Ferreira", "Larsen", "Moreau", "Kowalski"]


def main() -> None:
    DATA.mkdir(exist_ok=True)
    rng = random.Random(20240601)

    with open(DATA / "regions.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["region", "manager", "target"])
        w.writerows(REGIONS)

    with open(DATA / "products.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["product_id", "name", "category", "unit_cost"])
        w.writerows((pid, name, cat, cost) for pid, name, cat, cost, _ in PRODUCTS)

    start = dt.date(2024, 1, 1)
    with open(DATA / "sales.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["order_id", "date", "region", "product_id", "units", "unit_price"])
        for order in range(1, 241):
            day = start + dt.timedelta(days=rng.randrange(0, 182))
            region = rng.choice(REGIONS)[0]
            pid, _, _, _, price = rng.choice(PRODUCTS)
            units = rng.randint(1, 12)
            # Spring discounts on some orders: the price is not constant per product.
            if day.month >= 4 and rng.random() < 0.3:
                price = round(price * 0.85, 2)
            w.writerow([order, day.isoformat(), region, pid, units, price])

    with open(DATA / "weather.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "city", "temp_c", "rain_mm"])
        for d in range(91):
            day = start + dt.timedelta(days=d)
            for city, base, swing, wet in (("Lisbon", 12.5, 4.0, 0.35), ("Oslo", -3.0, 6.0, 0.5)):
                season = 2.5 * math.sin((d - 20) / 91 * math.pi)
                temp = round(base + season + rng.gauss(0, swing / 2), 1)
                rain = round(rng.expovariate(1 / 6.0), 1) if rng.random() < wet else 0.0
                w.writerow([day.isoformat(), city, temp, rain])

    with open(DATA / "employees.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["emp_id", "name", "department", "salary", "hire_date", "rating"])
        names = [f"{a} {b}" for a in FIRST for b in LAST]
        rng.shuffle(names)
        for emp in range(1, 41):
            dept, mean, sd = DEPARTMENTS[(emp * 7) % len(DEPARTMENTS)]
            salary = int(round(rng.gauss(mean, sd), -2))
            hired = dt.date(2015, 1, 1) + dt.timedelta(days=rng.randrange(0, 9 * 365))
            rating = round(rng.uniform(2.5, 5.0), 1)
            w.writerow([1000 + emp, names[emp], dept, salary, hired.isoformat(), rating])


if __name__ == "__main__":
    main()
