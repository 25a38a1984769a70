"""The web tools: weather, web search and reading a page, all through the egress gate.

Weather speaks an Open-Meteo-style API (geocoding, then forecast), search a SearXNG-style
JSON API, and fetch reads any allowlisted http(s) URL as plain text. Base URLs come from
settings. Every request goes through :func:`tools.perimeter.egress_transport.egress_get` (checked and
pinned on each hop, capped in redirects, bytes and time). What comes back is DATA: results are
plain JSON values that the turn fences before any model sees them; page text never becomes an
instruction, and script and style contents are dropped before anything is kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from selectolax.lexbor import LexborHTMLParser

from tollgate.tools.perimeter.config import egress_limits, egress_policy, service_urls
from tollgate.tools.perimeter.egress_transport import EgressLimits, FetchedResponse, Resolver, egress_get, system_resolver
from tollgate.policies.arguments import ArgsModel, Count, SafeText
from tollgate.policies.egress import EgressPolicy, EgressUrl, UrlField
from tollgate.policies.errors import NotFound, Unavailable
from tollgate.tools._render import clip, item_result, plural, quoted
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ToolSpec

__all__ = ["FetchArgs", "SearchArgs", "WeatherArgs", "WebConfig", "html_to_text", "web_tools"]

_MAX_TEXT: Final = 8000
_DROP: Final = "script, style, noscript, template, svg, iframe, object, head > meta"

# WMO weather interpretation codes (as used by Open-Meteo).
_WMO: Final[dict[int, str]] = {
    0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast", 45: "fog", 48: "freezing fog",
    51: "light drizzle", 53: "drizzle", 55: "heavy drizzle", 56: "freezing drizzle", 57: "freezing drizzle",
    61: "light rain", 63: "rain", 65: "heavy rain", 66: "freezing rain", 67: "freezing rain",
    71: "light snow", 73: "snow", 75: "heavy snow", 77: "snow grains", 80: "light showers", 81: "showers",
    82: "violent showers", 85: "snow showers", 86: "heavy snow showers", 95: "thunderstorm",
    96: "thunderstorm with hail", 99: "thunderstorm with heavy hail",
}


class WeatherArgs(ArgsModel):
    """The forecast for a place."""

    place: SafeText(100) = Field(description="City or place name, e.g. 'Paris' or 'Lyon, France'.")
    days: Count(1, 7) = Field(default=3, description="Days of forecast, 1-7.")


class SearchArgs(ArgsModel):
    """Search the web."""

    query: SafeText(200) = Field(description="What to search for.")
    limit: Count(1, 10) = Field(default=5, description="Maximum number of results.")


class FetchArgs(ArgsModel):
    """Read a web page as text."""

    url: Annotated[EgressUrl, UrlField()] = Field(description="The http(s) address of the page.")


@dataclass(frozen=True, slots=True)
class WebConfig:
    """Where the web tools go and how: base URLs, the egress policy and its caps, the resolver."""

    weather_url: str | None = None
    """Base of the forecast API (``…/v1/forecast``)."""
    geocoding_url: str | None = None
    """Base of the geocoding API (``…/v1/search``)."""
    search_url: str | None = None
    """Base of the search API (``…/search?format=json``)."""
    policy: EgressPolicy = field(default_factory=EgressPolicy)
    """The egress policy every request is checked against."""
    limits: EgressLimits = field(default_factory=EgressLimits)
    """Redirect, size and time caps."""
    resolver: Resolver = system_resolver
    """Host name resolution (injected in tests: no real DNS there)."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | BaseModel | None, *, resolver: Resolver = system_resolver) -> WebConfig:
        """The configuration for ``settings`` (its egress policy includes the service hosts)."""
        urls = service_urls(settings)
        return cls(
            weather_url=urls.get("weather"),
            geocoding_url=urls.get("geocoding"),
            search_url=urls.get("search"),
            policy=egress_policy(settings),
            limits=egress_limits(settings),
            resolver=resolver,
        )

    async def get(self, url: str, *, params: Mapping[str, str] | None = None, accept: str = "*/*") -> FetchedResponse:
        """GET through the gate."""
        return await egress_get(url, policy=self.policy, resolver=self.resolver, limits=self.limits, params=params, accept=accept)

    async def get_json(self, url: str, params: Mapping[str, str], what: str) -> Any:
        """GET a JSON document; anything else is the service being unavailable."""
        response = await self.get(url, params=params, accept="application/json")
        if response.status != 200:
            raise Unavailable(what)
        try:
            return json.loads(response.body)
        except ValueError:
            raise Unavailable(what) from None


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Place(_Loose):
    name: str
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)
    country: str = ""


class _Geocoding(_Loose):
    results: list[_Place] = []


class _Current(_Loose):
    temperature_2m: float
    weather_code: int = -1
    wind_speed_10m: float | None = None


class _Daily(_Loose):
    time: list[str]
    weather_code: list[int | None] = []
    temperature_2m_max: list[float | None] = []
    temperature_2m_min: list[float | None] = []
    precipitation_sum: list[float | None] = []


class _Forecast(_Loose):
    current: _Current | None = None
    daily: _Daily


class _Hit(_Loose):
    title: str = ""
    url: str = ""
    content: str = ""


class _Search(_Loose):
    results: list[_Hit] = []


def _at(values: list[Any], index: int) -> Any:
    return values[index] if index < len(values) else None


def _code(value: Any) -> int:
    return value if isinstance(value, int) else -1


async def _forecast(config: WebConfig, args: WeatherArgs) -> ActionResult:
    if not config.weather_url or not config.geocoding_url:
        raise Unavailable("weather service")
    try:
        geo = _Geocoding.model_validate(
            await config.get_json(
                f"{config.geocoding_url}/v1/search",
                {"name": args.place, "count": "1", "language": "en", "format": "json"},
                "weather service",
            )
        )
        if not geo.results:
            raise NotFound("place", clip(args.place, 60))
        place = geo.results[0]
        data = _Forecast.model_validate(
            await config.get_json(
                f"{config.weather_url}/v1/forecast",
                {
                    "latitude": f"{place.latitude:.4f}",
                    "longitude": f"{place.longitude:.4f}",
                    "current": "temperature_2m,weather_code,wind_speed_10m",
                    "daily": "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum",
                    "timezone": "auto",
                    "forecast_days": str(args.days),
                },
                "weather service",
            )
        )
    except ValidationError:
        raise Unavailable("weather service") from None
    name = f"{place.name}, {place.country}" if place.country else place.name
    days = [
        {
            "date": day,
            "summary": _WMO.get(_code(_at(data.daily.weather_code, i)), "mixed weather"),
            "high": _at(data.daily.temperature_2m_max, i),
            "low": _at(data.daily.temperature_2m_min, i),
            "precipitation_mm": _at(data.daily.precipitation_sum, i),
        }
        for i, day in enumerate(data.daily.time[: args.days])
    ]
    item: dict[str, Any] = {"place": name, "days": days}
    summary = f"Weather for {clip(name, 60)}"
    if data.current is not None:
        now = {"temperature": data.current.temperature_2m, "summary": _WMO.get(data.current.weather_code, "mixed weather")}
        item["now"] = now
        summary += f": now {now['temperature']:.0f}°C, {now['summary']}"
    summary += f"; {plural(len(days), 'day')} of forecast."
    return item_result("weather", "forecast", item, summary)


def _render_forecast(result: ActionResult) -> str:
    item = result.get("item") or {}
    lines = [result["summary"]]
    for day in item.get("days", []):
        high, low, rain = day.get("high"), day.get("low"), day.get("precipitation_mm")
        temps = f"{low:.0f}–{high:.0f}°C" if isinstance(high, (int, float)) and isinstance(low, (int, float)) else "n/a"
        wet = f", {rain:.1f} mm" if isinstance(rain, (int, float)) and rain > 0 else ""
        lines.append(f"- {day.get('date', '')}: {day.get('summary', '')}, {temps}{wet}")
    return "\n".join(lines)


async def _search(config: WebConfig, args: SearchArgs) -> ActionResult:
    if not config.search_url:
        raise Unavailable("web search")
    try:
        data = _Search.model_validate(
            await config.get_json(f"{config.search_url}/search", {"q": args.query, "format": "json"}, "web search")
        )
    except ValidationError:
        raise Unavailable("web search") from None
    hits = [
        {"title": clip(h.title, 200), "url": clip(h.url, 500), "snippet": clip(h.content, 300)}
        for h in data.results[: args.limit]
    ]
    summary = (
        f"No web results for {quoted(args.query, 60)}."
        if not hits
        else f"Top {plural(len(hits), 'web result')} for {quoted(args.query, 60)}."
    )
    return item_result("web", "search", {"query": args.query, "results": hits}, summary)


def _render_search(result: ActionResult) -> str:
    item = result.get("item") or {}
    lines = [result["summary"]]
    for i, hit in enumerate(item.get("results", []), 1):
        lines.append(f"{i}. {hit.get('title', '')} — {hit.get('url', '')}")
    return "\n".join(lines)


_BLANKS: Final = re.compile(r"\n\s*\n+")


def html_to_text(html: str) -> tuple[str, str]:
    """The title and visible text of an HTML page; scripts, styles and templates are dropped."""
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = clip(title_node.text(), 200) if title_node is not None else ""
    for node in tree.css(_DROP):
        node.decompose()
    root = tree.body or tree.root
    text = root.text(separator="\n", strip=True) if root is not None else ""
    return title, _BLANKS.sub("\n\n", text).strip()


async def _fetch(config: WebConfig, args: FetchArgs) -> ActionResult:
    response = await config.get(args.url, accept="text/html, text/plain;q=0.9, application/json;q=0.8")
    if response.status >= 400:
        raise Unavailable(f"that page (HTTP {response.status})")
    if response.content_type in ("text/html", "application/xhtml+xml"):
        title, text = html_to_text(response.text())
    elif response.content_type in ("text/plain", "text/markdown", "application/json", "text/csv", ""):
        title, text = "", response.text().strip()
    else:
        raise Unavailable("a readable text page at that address")
    truncated = len(text) > _MAX_TEXT
    if truncated:
        text = text[:_MAX_TEXT].rstrip() + "…"
    item = {"url": response.url, "title": title, "text": text, "truncated": truncated}
    label = quoted(title, 80) if title else "the page"
    summary = f"Read {label} ({plural(len(text), 'character')}{', truncated' if truncated else ''})."
    return item_result("web", "fetch", item, summary)


def _render_fetch(result: ActionResult) -> str:
    item = result.get("item") or {}
    head = item.get("title") or item.get("url", "")
    return f"{head}\n\n{clip(str(item.get('text', '')), 1500)}"


def _on(settings: Mapping[str, Any]) -> bool:
    return bool(settings.get("web_tools"))


def web_tools(settings: Mapping[str, Any] | BaseModel | None, *, resolver: Resolver = system_resolver) -> tuple[ToolSpec, ...]:
    """The web tools for ``settings`` (enabled by ``web_tools``; search only with a ``search_url``)."""
    config = WebConfig.from_settings(settings, resolver=resolver)

    async def forecast(ctx: ExecContext, args: WeatherArgs) -> ActionResult:
        return await _forecast(config, args)

    async def search(ctx: ExecContext, args: SearchArgs) -> ActionResult:
        return await _search(config, args)

    async def fetch(ctx: ExecContext, args: FetchArgs) -> ActionResult:
        return await _fetch(config, args)

    weather = ToolSpec(
        name="weather",
        description="Weather forecasts for any place.",
        capability_phrase="check the weather",
        enabled=_on,
        actions=(
            ActionSpec(
                name="forecast",
                description="Current weather and a forecast of up to 7 days for a place.",
                args=WeatherArgs,
                tier="allowlist",
                executor=forecast,
                renderer=_render_forecast,
                usage_examples=("What's the weather in Paris?", "Will it rain in Lyon tomorrow?", "Forecast for Berlin this week",
                                "Should I take an umbrella in Rome tomorrow?"),
            ),
        ),
    )
    actions = [
        ActionSpec(
            name="fetch",
            description="Read a web page at an http(s) address and return its text.",
            args=FetchArgs,
            tier="allowlist",
            executor=fetch,
            renderer=_render_fetch,
            third_party=True,
            usage_examples=(
                "Read https://example.com/article",
                "What does this page say: https://example.org/notes",
                "Open https://example.net/docs and summarize it",
            ),
        )
    ]
    if config.search_url:
        actions.insert(
            0,
            ActionSpec(
                name="search",
                description="Search the web and list the top results with their addresses.",
                args=SearchArgs,
                tier="allowlist",
                executor=search,
                renderer=_render_search,
                third_party=True,
                usage_examples=("Search the web for LangGraph interrupts", "Look up PostgreSQL advisory locks", "Find reviews of the Lisbon metro",
                                "Google the best pizza in Naples"),
            ),
        )
    web = ToolSpec(
        name="web",
        description="The public web.",
        capability_phrase="search the web and read pages",
        enabled=_on,
        actions=tuple(actions),
    )
    return (weather, web)
