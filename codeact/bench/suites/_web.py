"""A small offline website and a stateful browser (open, click, back, forward) to read it."""

from __future__ import annotations

from typing import Any

from ...tools import tool
from .._task import TaskContext

HOME = "https://northwind.example/"

# url -> (title, text, [(link text, url)])
PAGES: dict[str, tuple[str, str, list[tuple[str, str]]]] = {
    HOME: ("Northwind Outfitters", "Outdoor gear since 1998. Browse our products, stores and news.",
           [("About", HOME + "about"), ("Products", HOME + "products"), ("Stores", HOME + "stores"),
            ("News", HOME + "news")]),
    HOME + "about": ("About us", "Northwind Outfitters was founded in Bergen in 1998 by two climbers.",
                     [("Leadership", HOME + "about/leadership"), ("History", HOME + "about/history"),
                      ("Home", HOME)]),
    HOME + "about/leadership": ("Leadership",
                                "CEO: Maren Solberg\nCFO: Tomas Ek\nCTO: Priya Raman\nHead of Retail: Jon Alvik",
                                [("About", HOME + "about")]),
    HOME + "about/history": ("History",
                             "1998: first shop in Bergen.\n2006: first store abroad, in Gothenburg.\n"
                             "2015: online shop opens.\n2021: 30th store opens.",
                             [("About", HOME + "about")]),
    HOME + "products": ("Products", "Our product lines.",
                        [("Camping", HOME + "products/camping"), ("Hiking", HOME + "products/hiking"),
                         ("Climbing", HOME + "products/climbing"), ("Home", HOME)]),
    HOME + "products/camping": ("Camping",
                                "Summit Tent - 420 NOK\nRidge Tent - 310 NOK\nCamp Stove - 95 NOK\n"
                                "Sleeping Bag - 180 NOK",
                                [("Products", HOME + "products")]),
    HOME + "products/hiking": ("Hiking", "Trail Boots - 160 NOK\nDay Pack - 70 NOK\nTrekking Poles - 48 NOK",
                               [("Products", HOME + "products")]),
    HOME + "products/climbing": ("Climbing", "Harness - 85 NOK\nRope 60m - 230 NOK\nChalk Bag - 18 NOK\n"
                                             "Helmet - 75 NOK\nQuickdraw Set - 140 NOK",
                                 [("Products", HOME + "products")]),
    HOME + "stores": ("Stores", "Find a store near you, by region.",
                      [("Norway", HOME + "stores/norway"), ("Sweden", HOME + "stores/sweden"),
                       ("Denmark", HOME + "stores/denmark"), ("Home", HOME)]),
    HOME + "stores/norway": ("Stores in Norway", "Bergen (opened 1998)\nOslo (opened 2001)\nTromso (opened 2009)\n"
                                                 "Stavanger (opened 2012)\nTrondheim (opened 2016)",
                             [("Stores", HOME + "stores")]),
    HOME + "stores/sweden": ("Stores in Sweden", "Gothenburg (opened 2006)\nStockholm (opened 2010)\n"
                                                 "Malmo (opened 2018)",
                             [("Stores", HOME + "stores")]),
    HOME + "stores/denmark": ("Stores in Denmark", "Copenhagen (opened 2013)\nAarhus (opened 2020)",
                              [("Stores", HOME + "stores")]),
    HOME + "news": ("News", "Latest posts.",
                    [("Spring sale starts", HOME + "news/spring-sale"), ("New climbing line", HOME + "news/climbing"),
                     ("Store opening in Aarhus", HOME + "news/aarhus"), ("Home", HOME)]),
    HOME + "news/spring-sale": ("Spring sale starts", "Posted 2024-03-01. Up to 30% off tents until April 15.",
                                [("News", HOME + "news")]),
    HOME + "news/climbing": ("New climbing line", "Posted 2023-11-20. Five new climbing products, from 18 NOK.",
                             [("News", HOME + "news")]),
    HOME + "news/aarhus": ("Store opening in Aarhus", "Posted 2020-06-12. Our second Danish store opens today.",
                           [("News", HOME + "news")]),
}


def render(url: str) -> str:
    title, text, links = PAGES[url]
    lines = [f"# {title}", f"URL: {url}", "", text, "", "Links:"]
    lines += [f"- {name} -> {target}" for name, target in links]
    return "\n".join(lines)


def web_tools(ctx: TaskContext) -> list[Any]:
    """A fresh browser for one episode: its history (back/forward) is per episode."""
    history: list[str] = []
    position = [-1]  # index of the current page in history

    def current() -> str:
        if position[0] < 0:
            raise RuntimeError("no page is open; call open_page(url) first")
        return history[position[0]]

    def go(url: str) -> str:
        del history[position[0] + 1:]
        history.append(url)
        position[0] = len(history) - 1
        return render(url)

    @tool
    def open_page(url: str) -> str:
        """Open a page by URL; returns its text and links. The site starts at https://northwind.example/."""
        if url not in PAGES:
            raise LookupError(f"404: no page at {url}")
        return go(url)

    @tool
    def click(link_text: str) -> str:
        """Follow a link of the current page by its text (exactly as listed); returns the new page."""
        _, _, links = PAGES[current()]
        for name, target in links:
            if name == link_text:
                return go(target)
        raise LookupError(f"no link {link_text!r} on this page; links: {', '.join(n for n, _ in links)}")

    @tool
    def back() -> str:
        """Go back one page in the browser history; returns that page."""
        current()
        if position[0] == 0:
            raise RuntimeError("cannot go back: this is the first page of the history")
        position[0] -= 1
        return render(history[position[0]])

    @tool
    def forward() -> str:
        """Go forward one page in the browser history (after back); returns that page."""
        current()
        if position[0] >= len(history) - 1:
            raise RuntimeError("cannot go forward: this is the last page of the history")
        position[0] += 1
        return render(history[position[0]])

    @tool
    def current_page() -> tuple[str, str]:
        """The (url, title) of the page the browser shows now."""
        url = current()
        return url, PAGES[url][0]

    @tool
    def search_site(query: str) -> list[str]:
        """URLs of the pages whose title or text contains `query` (case-insensitive)."""
        q = query.lower()
        return [url for url, (title, text, _) in PAGES.items() if q in title.lower() or q in text.lower()]

    return [open_page, click, back, forward, current_page, search_site]
