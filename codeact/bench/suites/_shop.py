"""An offline shop: a product catalogue, reviews, suppliers, currency rates and a cart."""

from __future__ import annotations

from typing import Any, Literal

from ...tools import tool
from .._task import TaskContext

# id, name, category, price (USD), stock, rating, supplier
PRODUCTS: list[dict[str, Any]] = [
    {"id": 1, "name": "Arc Desk Lamp", "category": "lighting", "price": 39.9, "stock": 12, "supplier": "Lumen Co"},
    {"id": 2, "name": "Halo Floor Lamp", "category": "lighting", "price": 89.0, "stock": 0, "supplier": "Lumen Co"},
    {"id": 3, "name": "Clip Reading Lamp", "category": "lighting", "price": 24.5, "stock": 3, "supplier": "Brightway"},
    {"id": 4, "name": "Mini Lamp", "category": "lighting", "price": 19.0, "stock": 0, "supplier": "Brightway"},
    {"id": 5, "name": "Studio Lamp Pro", "category": "lighting", "price": 129.0, "stock": 7, "supplier": "Lumen Co"},
    {"id": 6, "name": "Oak Writing Desk", "category": "furniture", "price": 249.0, "stock": 4, "supplier": "Nordholz"},
    {"id": 7, "name": "Standing Desk", "category": "furniture", "price": 399.0, "stock": 2, "supplier": "ErgoWorks"},
    {"id": 8, "name": "Corner Desk", "category": "furniture", "price": 189.0, "stock": 0, "supplier": "Nordholz"},
    {"id": 9, "name": "Mesh Office Chair", "category": "furniture", "price": 159.0, "stock": 9,
     "supplier": "ErgoWorks"},
    {"id": 10, "name": "Lounge Chair", "category": "furniture", "price": 299.0, "stock": 1, "supplier": "Casa Verde"},
    {"id": 11, "name": "Folding Chair", "category": "furniture", "price": 29.0, "stock": 40, "supplier": "Casa Verde"},
    {"id": 12, "name": "Glass Kettle", "category": "kitchen", "price": 34.0, "stock": 6, "supplier": "Brightway"},
    {"id": 13, "name": "Steel Kettle", "category": "kitchen", "price": 45.0, "stock": 2, "supplier": "Kuchen AG"},
    {"id": 14, "name": "Travel Kettle", "category": "kitchen", "price": 21.5, "stock": 11, "supplier": "Kuchen AG"},
    {"id": 15, "name": "Chef Knife", "category": "kitchen", "price": 59.0, "stock": 3, "supplier": "Kuchen AG"},
    {"id": 16, "name": "Cast Iron Pan", "category": "kitchen", "price": 48.0, "stock": 1, "supplier": "Casa Verde"},
    {"id": 17, "name": "Studio Headphones", "category": "audio", "price": 149.0, "stock": 5, "supplier": "SoundLab"},
    {"id": 18, "name": "Wireless Earbuds", "category": "audio", "price": 79.0, "stock": 14, "supplier": "SoundLab"},
    {"id": 19, "name": "Kids Headphones", "category": "audio", "price": 25.0, "stock": 8, "supplier": "Brightway"},
    {"id": 20, "name": "Bluetooth Speaker", "category": "audio", "price": 65.0, "stock": 0, "supplier": "SoundLab"},
]

REVIEWS: dict[int, list[tuple[int, str]]] = {
    1: [(5, "Great light"), (4, "Solid"), (4, "Nice arm")],
    2: [(3, "Wobbly base"), (5, "Beautiful")],
    3: [(4, "Handy"), (2, "Clip broke"), (5, "Perfect for books")],
    4: [(3, "Small")],
    5: [(5, "Pro quality"), (5, "Worth it"), (4, "Bright"), (5, "Excellent")],
    6: [(5, "Sturdy"), (4, "Heavy")],
    7: [(5, "Changed my back"), (5, "Quiet motor"), (3, "Wobbles at max height")],
    8: [(4, "Fits the corner")],
    9: [(4, "Comfortable"), (5, "Great support"), (5, "Breathable")],
    10: [(5, "So comfy"), (5, "Stylish"), (5, "Best chair"), (2, "Stains easily")],
    11: [(3, "Fine"), (4, "Light")],
    12: [(4, "Pretty"), (3, "Slow")],
    13: [(5, "Fast boil")],
    14: [(4, "Compact"), (4, "Good for trips"), (2, "Leaks")],
    15: [(5, "Sharp"), (5, "Balanced")],
    16: [(4, "Heavy duty")],
    17: [(5, "Crisp"), (4, "Comfortable"), (5, "Studio grade")],
    18: [(4, "Good battery"), (3, "Loose fit"), (4, "Nice sound"), (5, "Love them")],
    19: [(4, "Volume limit works"), (3, "Flimsy")],
    20: [(4, "Loud")],
}

SUPPLIERS: dict[str, tuple[str, int]] = {
    "Lumen Co": ("Denmark", 9),
    "Brightway": ("China", 28),
    "Nordholz": ("Germany", 12),
    "ErgoWorks": ("Taiwan", 21),
    "Casa Verde": ("Portugal", 6),
    "Kuchen AG": ("Germany", 10),
    "SoundLab": ("South Korea", 18),
}

#: Units of each currency per US dollar.
RATES = {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 151.0}


def shop_tools(ctx: TaskContext) -> list[Any]:
    """Fresh shop tools for one episode (the catalogue is read-only; nothing is shared)."""

    by_id = {p["id"]: p for p in PRODUCTS}

    @tool
    def search_products(query: str = "", category: str | None = None) -> list[dict]:
        """Find products whose name contains `query` (case-insensitive), optionally in one category.

        Args:
            query: part of the product name; "" matches every product.
            category: one of lighting, furniture, kitchen, audio.

        Returns:
            a list of {"id", "name", "price"} (price in USD), in catalogue order.
        """
        q = query.lower()
        return [{"id": p["id"], "name": p["name"], "price": p["price"]} for p in PRODUCTS
                if q in p["name"].lower() and (category is None or p["category"] == category)]

    @tool
    def get_product(product_id: int) -> dict:
        """Everything about one product: id, name, category, price (USD), stock (units) and supplier."""
        if product_id not in by_id:
            raise KeyError(f"no product with id {product_id}")
        return dict(by_id[product_id])

    @tool
    def get_reviews(product_id: int) -> list[dict]:
        """The reviews of a product: a list of {"stars": 1-5, "title": str}."""
        if product_id not in by_id:
            raise KeyError(f"no product with id {product_id}")
        return [{"stars": s, "title": t} for s, t in REVIEWS.get(product_id, [])]

    @tool
    def supplier_info(name: str) -> tuple[str, int]:
        """A supplier's (country, lead time in days)."""
        if name not in SUPPLIERS:
            raise KeyError(f"no supplier named {name!r}")
        return SUPPLIERS[name]

    @tool
    def convert_currency(amount: float, to_currency: Literal["USD", "EUR", "GBP", "JPY"]) -> float:
        """Convert an amount in USD to another currency, rounded to 2 decimals."""
        return round(amount * RATES[to_currency], 2)

    @tool
    def cart_total(*product_ids: int) -> tuple[float, int]:
        """Put one of each given product in a cart: returns (total price in USD, number of items).

        Example: cart_total(1, 3, 12)
        """
        for pid in product_ids:
            if pid not in by_id:
                raise KeyError(f"no product with id {pid}")
        return round(sum(by_id[pid]["price"] for pid in product_ids), 2), len(product_ids)

    return [search_products, get_product, get_reviews, supplier_info, convert_currency, cart_total]
