"""tool-chains: multi-step chores over offline tools in five domains.

Every task needs three or more tool calls, with loops, filtering or
aggregation over their results: a shop (catalogue, reviews, suppliers, a
variadic cart), a small website read with a stateful browser (back and
forward), a company directory (schedules as tuples, a variadic free-slot
finder), travel data, and a library (variadic ``average``/``total``).

Each task's oracle is one plan (see :mod:`codeact.bench._plan`): the CodeAct
oracle is its code form, the ReAct oracles replay its calls.
"""

from __future__ import annotations

from typing import Any, Callable

from .._checkers import numeric, unordered
from .._plan import Plan, PlanSteps, call
from .._task import Oracle, Task
from ._library import library_tools
from ._office import office_tools
from ._shop import shop_tools
from ._travel import travel_tools
from ._web import web_tools

NAME = "tool-chains"
DESCRIPTION = "33 multi-step tasks over offline tools (shop, website, directory, travel, library); 3+ calls each"

_TASKS: list[Task] = []


def _task(id: str, instruction: str, tools: Any, expected: Any, *, check: Any = "exact", tags: tuple[str, ...] = (),
          max_turns: int = 20) -> Callable[[Plan], Plan]:
    def register(plan: Plan) -> Plan:
        _TASKS.append(Task(id=id, instruction=instruction, tools=tools, expected=expected, check=check,
                           tags=tags, max_turns=max_turns, oracle=Oracle(plan)))
        return plan

    return register


def tasks() -> list[Task]:
    """The suite's tasks."""
    return list(_TASKS)


# --------------------------------------------------------------------------- shop


@_task("shop-cheapest-lamp-in-stock",
       "Of the products whose name contains 'lamp', which one that is in stock is the cheapest? "
       "Answer with the product name.",
       shop_tools, "Clip Reading Lamp", tags=("shop", "filter"))
def _shop_cheapest_lamp() -> PlanSteps:
    hits = yield call("search_products", query="lamp")
    details = yield [call("get_product", product_id=h["id"]) for h in hits]
    in_stock = [d for d in details if d["stock"] > 0]
    return min(in_stock, key=lambda d: d["price"])["name"]


@_task("shop-audio-average-stars",
       "What is the average star rating over all reviews of all products in the audio category? "
       "Round to 2 decimals.",
       shop_tools, 4.1, check=numeric(abs_tol=0.006), tags=("shop", "aggregate"))
def _shop_audio_stars() -> PlanSteps:
    hits = yield call("search_products", category="audio")
    reviews = yield [call("get_reviews", product_id=h["id"]) for h in hits]
    stars = [r["stars"] for rs in reviews for r in rs]
    return round(sum(stars) / len(stars), 2)


@_task("shop-kettles-cart-eur",
       "Put one of each product whose name contains 'kettle' in a cart (use cart_total) and give the cart's "
       "total price converted to EUR.",
       shop_tools, 92.46, check=numeric(abs_tol=0.006), tags=("shop", "variadic", "tuple"))
def _shop_kettles_cart() -> PlanSteps:
    hits = yield call("search_products", query="kettle")
    total, count = yield call("cart_total", *[h["id"] for h in hits])
    return (yield call("convert_currency", amount=total, to_currency="EUR"))


@_task("shop-chair-most-five-stars",
       "Which product whose name contains 'chair' has the most 5-star reviews? Answer with its name.",
       shop_tools, "Lounge Chair", tags=("shop", "aggregate"))
def _shop_chair_five_stars() -> PlanSteps:
    hits = yield call("search_products", query="chair")
    reviews = yield [call("get_reviews", product_id=h["id"]) for h in hits]
    counts = [sum(1 for r in rs if r["stars"] == 5) for rs in reviews]
    return hits[counts.index(max(counts))]["name"]


@_task("shop-desk-shortest-lead",
       "Among the furniture products whose name contains 'desk' and that are in stock, which one comes from the "
       "supplier with the shortest lead time? Answer with the product name.",
       shop_tools, "Oak Writing Desk", tags=("shop", "filter", "tuple"))
def _shop_desk_lead() -> PlanSteps:
    hits = yield call("search_products", query="desk", category="furniture")
    details = yield [call("get_product", product_id=h["id"]) for h in hits]
    in_stock = [d for d in details if d["stock"] > 0]
    suppliers = sorted({d["supplier"] for d in in_stock})
    infos = yield [call("supplier_info", name=s) for s in suppliers]
    lead = {s: info[1] for s, info in zip(suppliers, infos, strict=True)}
    return min(in_stock, key=lambda d: lead[d["supplier"]])["name"]


@_task("shop-kitchen-low-stock",
       "List the names of all kitchen products with fewer than 5 units in stock.",
       shop_tools, ["Steel Kettle", "Chef Knife", "Cast Iron Pan"], check=unordered(), tags=("shop", "filter"))
def _shop_kitchen_low_stock() -> PlanSteps:
    hits = yield call("search_products", category="kitchen")
    details = yield [call("get_product", product_id=h["id"]) for h in hits]
    return [d["name"] for d in details if d["stock"] < 5]


@_task("shop-lamp-spread-gbp",
       "Convert the prices of the cheapest and the most expensive product whose name contains 'lamp' to GBP. "
       "What is the difference between them in GBP?",
       shop_tools, 86.9, check=numeric(abs_tol=0.011), tags=("shop", "aggregate"))
def _shop_lamp_spread() -> PlanSteps:
    hits = yield call("search_products", query="lamp")
    prices = [h["price"] for h in hits]
    low, high = yield [call("convert_currency", amount=min(prices), to_currency="GBP"),
                       call("convert_currency", amount=max(prices), to_currency="GBP")]
    return round(high - low, 2)


@_task("shop-audio-supplier-countries",
       "In which countries are the suppliers of the audio products based? List each country once.",
       shop_tools, ["China", "South Korea"], check=unordered(), tags=("shop", "tuple"))
def _shop_audio_countries() -> PlanSteps:
    hits = yield call("search_products", category="audio")
    details = yield [call("get_product", product_id=h["id"]) for h in hits]
    names = sorted({d["supplier"] for d in details})
    infos = yield [call("supplier_info", name=n) for n in names]
    return sorted({info[0] for info in infos})


# --------------------------------------------------------------------------- website


@_task("web-ceo",
       "On the website https://northwind.example/ find the name of the CEO: open the home page and follow the "
       "links About, then Leadership.",
       web_tools, "Maren Solberg", tags=("web", "stateful"))
def _web_ceo() -> PlanSteps:
    yield call("open_page", url="https://northwind.example/")
    yield call("click", link_text="About")
    page = yield call("click", link_text="Leadership")
    import re
    return re.findall("CEO: (.+)", page)[0].strip()


@_task("web-count-stores",
       "How many stores does Northwind Outfitters have in total? Open https://northwind.example/stores and visit "
       "each country's page (use back to return to the list).",
       web_tools, 10, tags=("web", "stateful", "loop"))
def _web_count_stores() -> PlanSteps:
    import re
    stores = yield call("open_page", url="https://northwind.example/stores")
    countries = re.findall(r"^- (\w+) -> \S+/stores/\w+$", stores, re.M)
    total = 0
    for country in countries:
        page = yield call("click", link_text=country)
        total += sum(1 for line in page.splitlines() if "(opened" in line)
        yield call("back")
    return total


@_task("web-camping-total",
       "What do all the products on the Camping page cost together, in NOK? Start at https://northwind.example/ "
       "and navigate through Products.",
       web_tools, 1005, tags=("web", "stateful", "aggregate"))
def _web_camping_total() -> PlanSteps:
    import re
    yield call("open_page", url="https://northwind.example/")
    yield call("click", link_text="Products")
    page = yield call("click", link_text="Camping")
    return sum(int(p) for p in re.findall(r" - (\d+) NOK", page))


@_task("web-back-forward",
       "Open https://northwind.example/, click News, then 'New climbing line', then go back, then forward again. "
       "What is the title of the page the browser shows now (use current_page)?",
       web_tools, "New climbing line", tags=("web", "stateful", "tuple"))
def _web_back_forward() -> PlanSteps:
    yield call("open_page", url="https://northwind.example/")
    yield call("click", link_text="News")
    yield call("click", link_text="New climbing line")
    yield call("back")
    yield call("forward")
    url, title = yield call("current_page")
    return title


@_task("web-oldest-post",
       "The page https://northwind.example/news links to the site's news posts. Which post was published "
       "earliest? Answer with its title.",
       web_tools, "Store opening in Aarhus", tags=("web", "stateful", "aggregate"))
def _web_oldest_post() -> PlanSteps:
    import re
    news = yield call("open_page", url="https://northwind.example/news")
    links = re.findall(r"^- (.+) -> (\S+/news/\S+)$", news, re.M)
    pages = yield [call("open_page", url=u) for _, u in links]
    dated = [(re.findall(r"Posted (\d{4}-\d{2}-\d{2})", p)[0], title)
             for (title, _), p in zip(links, pages, strict=True)]
    return min(dated)[1]


@_task("web-gothenburg-year",
       "Use the site search of northwind.example to find the pages that mention Gothenburg, read them, and say in "
       "which year the Gothenburg store opened.",
       web_tools, 2006, tags=("web", "search"))
def _web_gothenburg() -> PlanSteps:
    import re
    urls = yield call("search_site", query="Gothenburg")
    pages = yield [call("open_page", url=u) for u in urls]
    years = [int(m.group(1)) for p in pages for m in re.finditer(r"Gothenburg \(opened (\d{4})\)", p)]
    return years[0]


@_task("web-climbing-over-80",
       "Which climbing products cost more than 80 NOK? Start at https://northwind.example/, go to Products, then "
       "Climbing, and list the product names.",
       web_tools, ["Harness", "Rope 60m", "Quickdraw Set"], check=unordered(), tags=("web", "stateful", "filter"))
def _web_climbing() -> PlanSteps:
    import re
    yield call("open_page", url="https://northwind.example/")
    yield call("click", link_text="Products")
    page = yield call("click", link_text="Climbing")
    return [name for name, price in re.findall(r"^(.+) - (\d+) NOK$", page, re.M) if int(price) > 80]


# --------------------------------------------------------------------------- directory


@_task("office-busiest-engineer",
       "Which member of the Engineering department has the most meetings on Tuesday?",
       office_tools, "Tom Hale", tags=("office", "aggregate", "tuple"))
def _office_busiest() -> PlanSteps:
    names = yield call("list_employees", department="Engineering")
    schedules = yield [call("get_schedule", name=n, day="tuesday") for n in names]
    counts = [len(s) for s in schedules]
    return names[counts.index(max(counts))]


@_task("office-data-team-slot",
       "Find the earliest 60-minute slot on Wednesday when everyone in the Data department is free, and the "
       "meeting room of the Berlin office that seats the most people. Answer as [start, end, room].",
       office_tools, ["14:00", "15:00", "Mitte"], tags=("office", "variadic", "tuple"))
def _office_data_slot() -> PlanSteps:
    names = yield call("list_employees", department="Data")
    slot = yield call("find_common_free_slot", "wednesday", *names, minutes=60)
    rooms = yield call("list_rooms", office="Berlin")
    capacities = yield [call("room_capacity", room=r) for r in rooms]
    return [slot[0], slot[1], rooms[capacities.index(max(capacities))]]


@_task("office-manager-chain",
       "List Ana Lima's chain of managers, from her direct manager up to the CEO, in order.",
       office_tools, ["Sofia Berg", "Rui Tavares", "Helena Moreau"], tags=("office", "loop"))
def _office_manager_chain() -> PlanSteps:
    chain = []
    person = yield call("get_employee", name="Ana Lima")
    while person["manager"] is not None:
        chain.append(person["manager"])
        person = yield call("get_employee", name=person["manager"])
    return chain


@_task("office-largest-lisbon-room",
       "Which meeting room of the Lisbon office seats the most people, and how many? Answer as [room, seats].",
       office_tools, ["Alfama", 20], tags=("office", "aggregate"))
def _office_lisbon_room() -> PlanSteps:
    rooms = yield call("list_rooms", office="Lisbon")
    capacities = yield [call("room_capacity", room=r) for r in rooms]
    best = capacities.index(max(capacities))
    return [rooms[best], capacities[best]]


@_task("office-sales-meeting-hours",
       "How many hours in total do the members of the Sales department spend in meetings on Monday?",
       office_tools, 8.5, check=numeric(abs_tol=0.01), tags=("office", "aggregate", "tuple"))
def _office_sales_hours() -> PlanSteps:
    def minutes(t: str) -> int:
        h, m = t.split(":")
        return int(h) * 60 + int(m)

    names = yield call("list_employees", department="Sales")
    schedules = yield [call("get_schedule", name=n, day="monday") for n in names]
    return sum(minutes(end) - minutes(start) for s in schedules for start, end, _ in s) / 60


@_task("office-newest-in-berlin",
       "Who is the most recently hired employee (latest start year) working in the Berlin office?",
       office_tools, "Kenji Mori", tags=("office", "filter", "loop"))
def _office_newest_berlin() -> PlanSteps:
    names = yield call("list_employees")
    people = yield [call("get_employee", name=n) for n in names]
    berlin = [p for p in people if p["office"] == "Berlin"]
    return max(berlin, key=lambda p: p["start_year"])["name"]


# --------------------------------------------------------------------------- travel


@_task("travel-cheapest-nonstop",
       "What is the cheapest nonstop flight from Lisbon on Friday to Paris, Rome or Berlin? "
       "Answer with the flight number.",
       travel_tools, "FR2201", tags=("travel", "filter"))
def _travel_cheapest_nonstop() -> PlanSteps:
    found = yield [call("search_flights", origin="Lisbon", destination=c, day="friday")
                   for c in ["Paris", "Rome", "Berlin"]]
    nonstop = [f for flights in found for f in flights if f["stops"] == 0]
    return min(nonstop, key=lambda f: f["price"])["flight"]


@_task("travel-warmest-saturday",
       "Which of Paris, Rome, Berlin, Madrid and Oslo has the highest forecast temperature on Saturday?",
       travel_tools, "Rome", tags=("travel", "aggregate"))
def _travel_warmest() -> PlanSteps:
    cities = ["Paris", "Rome", "Berlin", "Madrid", "Oslo"]
    forecasts = yield [call("get_weather", city=c, day="saturday") for c in cities]
    highs = [f["high"] for f in forecasts]
    return cities[highs.index(max(highs))]


@_task("travel-rome-trip-cost",
       "Price the cheapest trip to Rome: fly from Lisbon on Friday, stay 2 nights in the cheapest hotel, and fly "
       "back from Rome to Lisbon on Sunday. What is the total cost in EUR?",
       travel_tools, 343.0, check=numeric(abs_tol=0.01), tags=("travel", "aggregate", "tuple"))
def _travel_rome_trip() -> PlanSteps:
    out, hotels, back = yield [call("search_flights", origin="Lisbon", destination="Rome", day="friday"),
                               call("hotel_prices", city="Rome", nights=2),
                               call("search_flights", origin="Rome", destination="Lisbon", day="sunday")]
    return (min(f["price"] for f in out) + min(total for _, total in hotels) + min(f["price"] for f in back))


@_task("travel-dry-days-paris",
       "On which days of the week is the chance of rain in Paris below 30%? Answer with the weekday names.",
       travel_tools, ["wednesday", "thursday", "sunday"], check=unordered(), tags=("travel", "filter", "loop"))
def _travel_dry_days() -> PlanSteps:
    days = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
    forecasts = yield [call("get_weather", city="Paris", day=d) for d in days]
    return [d for d, f in zip(days, forecasts, strict=True) if f["rain_chance"] < 30]


@_task("travel-cheap-destinations-population",
       "From Lisbon on Friday, which of Paris, Rome, Berlin, Madrid and Oslo can you reach with a nonstop flight "
       "under 100 EUR? Give the total population of those cities.",
       travel_tools, 6_082_000, tags=("travel", "filter", "tuple"))
def _travel_cheap_population() -> PlanSteps:
    cities = ["Paris", "Rome", "Berlin", "Madrid", "Oslo"]
    found = yield [call("search_flights", origin="Lisbon", destination=c, day="friday") for c in cities]
    cheap = [c for c, flights in zip(cities, found, strict=True)
             if any(f["stops"] == 0 and f["price"] < 100 for f in flights)]
    infos = yield [call("city_info", city=c) for c in cheap]
    return sum(info[1] for info in infos)


@_task("travel-largest-time-difference",
       "Which of Athens, Dubai, New York and Reykjavik has the largest time difference from Lisbon (in absolute "
       "hours), and how many hours is it? Answer as [city, hours].",
       travel_tools, ["New York", 5], tags=("travel", "aggregate", "tuple"))
def _travel_time_difference() -> PlanSteps:
    cities = ["Athens", "Dubai", "New York", "Reykjavik"]
    lisbon, *others = yield [call("city_info", city=c) for c in ["Lisbon", *cities]]
    gaps = [abs(info[2] - lisbon[2]) for info in others]
    best = gaps.index(max(gaps))
    return [cities[best], gaps[best]]


# --------------------------------------------------------------------------- library


@_task("library-oldest-astronomy",
       "What is the title of the oldest astronomy book in the library?",
       library_tools, "Moons of the Outer Planets", tags=("library", "aggregate"))
def _library_oldest_astronomy() -> PlanSteps:
    isbns = yield call("search_books", subject="astronomy")
    books = yield [call("book_info", isbn=i) for i in isbns]
    return min(books, key=lambda b: b["year"])["title"]


@_task("library-prado-pages",
       "How many pages do all of Ines Prado's books have together? Add them up with the total tool.",
       library_tools, 1153, tags=("library", "variadic"))
def _library_prado_pages() -> PlanSteps:
    isbns = yield call("search_books", author="Ines Prado")
    books = yield [call("book_info", isbn=i) for i in isbns]
    return (yield call("total", *[b["pages"] for b in books]))


@_task("library-history-due-early",
       "Which members have a history book on loan that is due before 2024-03-01? Answer with their names.",
       library_tools, ["Fatima Nunes", "Gus Oliveira", "Bea Santos"], check=unordered(),
       tags=("library", "filter", "tuple"))
def _library_history_due() -> PlanSteps:
    isbns = yield call("search_books", subject="history")
    loans = yield [call("loans_for", isbn=i) for i in isbns]
    members = sorted({member for book_loans in loans for member, due in book_loans if due < "2024-03-01"})
    infos = yield [call("member_info", member_id=m) for m in members]
    return [info[0] for info in infos]


@_task("library-byrne-average-year",
       "What is the average publication year of Ada Byrne's books? Compute it with the average tool.",
       library_tools, 2007.33, check=numeric(abs_tol=0.006), tags=("library", "variadic"))
def _library_byrne_year() -> PlanSteps:
    isbns = yield call("search_books", author="Ada Byrne")
    books = yield [call("book_info", isbn=i) for i in isbns]
    return (yield call("average", *[b["year"] for b in books]))


@_task("library-astronomy-unavailable",
       "A book's available copies are the copies the library owns minus its current loans. Which astronomy books "
       "have no copy available? Answer with their titles.",
       library_tools, ["Moons of the Outer Planets", "Light Years"], check=unordered(), tags=("library", "filter"))
def _library_unavailable() -> PlanSteps:
    isbns = yield call("search_books", subject="astronomy")
    books = yield [call("book_info", isbn=i) for i in isbns]
    loans = yield [call("loans_for", isbn=i) for i in isbns]
    return [b["title"] for b, book_loans in zip(books, loans, strict=True) if b["copies"] - len(book_loans) == 0]


@_task("library-lisbon-loans",
       "How many loans in total are currently held by members who live in Lisbon?",
       library_tools, 6, tags=("library", "aggregate", "tuple", "loop"), max_turns=25)
def _library_lisbon_loans() -> PlanSteps:
    isbns = yield call("search_books")
    loans = yield [call("loans_for", isbn=i) for i in isbns]
    members = sorted({member for book_loans in loans for member, _ in book_loans})
    infos = yield [call("member_info", member_id=m) for m in members]
    in_lisbon = {m for m, info in zip(members, infos, strict=True) if info[1] == "Lisbon"}
    return sum(1 for book_loans in loans for member, _ in book_loans if member in in_lisbon)
