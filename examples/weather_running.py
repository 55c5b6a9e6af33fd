"""Weather and running: a tool on the host, the reasoning in code.

``get_daily_weather(city)`` is an ordinary Python function that runs on the
host (here it reads the offline fixture ``data/weather.json``; a real one
would call a weather API with a key the sandbox never sees). The model calls
it from its code like any function and turns the numbers into advice.

    python examples/weather_running.py --scripted
    CODEACT_MODEL=qwen-plus OPENAI_BASE_URL=https://dashscope.aliyuncs.com/compatible-mode/v1 \\
        OPENAI_API_KEY=sk-... python examples/weather_running.py
    python examples/weather_running.py --task "后天哈尔滨适合跑步吗?"   # other questions need a real model

See examples/README.md for all options.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any, Sequence

from _common import DATA, make_agent, parser, run

from codeact import tool
from codeact.events import RunResult

WEATHER_FILE = DATA / "weather.json"
TASK = "明天北京的天气适合跑步吗?"


@lru_cache(maxsize=1)
def _fixture() -> dict[str, Any]:
    return json.loads(WEATHER_FILE.read_text(encoding="utf-8"))


@tool
def get_daily_weather(city: str) -> dict:
    """Daily weather for a city: today, tomorrow (明天) and the day after (后天).

    Each day has: date, label (今天/明天/后天), condition, temp_min and temp_max (°C),
    precipitation_probability (%), aqi (air quality index, lower is better),
    wind (text), wind_level (Beaufort), humidity (%) and uv_index.

    Args:
        city: city name in Chinese or English, e.g. 北京 or Beijing

    Returns:
        {"city": ..., "updated": ..., "days": [today, tomorrow, day after]}
    """
    data = _fixture()
    wanted = city.strip().lower()
    for name, entry in data["cities"].items():
        if wanted == name.lower() or wanted in (a.lower() for a in entry["aliases"]):
            return {"city": name, "updated": data["updated"], "days": entry["days"]}
    known = ", ".join(f"{name} ({entry['aliases'][0]})" for name, entry in data["cities"].items())
    raise ValueError(f"no weather data for {city!r}; cities available: {known}")


SCRIPTED_REPLIES = [
    """先查一下北京未来几天的天气, 找出明天的那一条。

```python
weather = get_daily_weather("北京")
tomorrow = next(d for d in weather["days"] if d["label"] == "明天")
print("数据更新于", weather["updated"])
for key, value in tomorrow.items():
    print(f"{key}: {value}")
```""",
    """明天的数据拿到了。按跑步的常见标准逐项检查: 降水概率不超过 30%, 气温在 5~30°C 之间, \
空气质量指数 (AQI) 不超过 100, 风力不超过 4 级; 再根据紫外线给出时段建议。

```python
checks = {
    "降水": (tomorrow["precipitation_probability"] <= 30, f"降水概率 {tomorrow['precipitation_probability']}%"),
    "气温": (5 <= tomorrow["temp_min"] and tomorrow["temp_max"] <= 30,
             f"{tomorrow['temp_min']}~{tomorrow['temp_max']}°C"),
    "空气质量": (tomorrow["aqi"] <= 100, f"AQI {tomorrow['aqi']}"),
    "风力": (tomorrow["wind_level"] <= 4, tomorrow["wind"]),
}
for name, (ok, detail) in checks.items():
    print(f"{'✓' if ok else '✗'} {name}: {detail}")

suitable = all(ok for ok, _ in checks.values())
problems = [name for name, (ok, _) in checks.items() if not ok]
summary = (f"明天({tomorrow['date']})北京{tomorrow['condition']}, {tomorrow['temp_min']}~{tomorrow['temp_max']}°C, "
           f"降水概率 {tomorrow['precipitation_probability']}%, AQI {tomorrow['aqi']}, {tomorrow['wind']}。")
if suitable:
    summary += "适合跑步。"
    if tomorrow["uv_index"] >= 6:
        summary += f"紫外线较强(指数 {tomorrow['uv_index']}), 建议清晨 6~8 点或傍晚跑, 注意防晒补水。"
    else:
        summary += "全天都可以, 清晨或傍晚最舒服。"
else:
    summary += "不太适合户外跑步(" + "、".join(problems) + "不理想), 可以改在室内跑步机上练。"
print(summary)

final_answer({
    "city": "北京",
    "date": tomorrow["date"],
    "suitable": suitable,
    "summary": summary,
    "checks": {name: detail for name, (ok, detail) in checks.items()},
})
```""",
]


def main(argv: Sequence[str] | None = None) -> RunResult:
    p = parser("Ask whether tomorrow's weather in Beijing suits a run (tool: get_daily_weather).")
    p.add_argument("--task", default=TASK,
                   help=f"the question (default: {TASK}); the scripted replies answer the default")
    args = p.parse_args(argv)
    agent = make_agent(args, SCRIPTED_REPLIES, [get_daily_weather])
    return run(agent, args.task, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(0 if main().ok else 1)
