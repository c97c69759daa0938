"""Vega-Lite specs for the static site: a run's metrics with its events marked, and the reliability diagram.

Specs are plain JSON data. The site writes them into `<script type="application/json">`
blocks that the page's own script hands to Vega-Embed, so nothing in a spec is ever
run as code and every string in it (a metric's name, an event's summary) reaches
the browser as data. Vega evaluates its expressions with its interpreter
(`ast: true` in `site.js`), so the pages need no `unsafe-eval`.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"
MAX_POINTS = 2000
"""Points drawn per curve; beyond this each bucket of steps keeps its lowest and highest value (see `thin`)."""

MARK_COLOURS = {
    "restart": "#c0392b", "spike": "#8e44ad", "skip": "#7f8c8d", "rollback": "#e67e22",
    "live change": "#27ae60", "milestone": "#2c3e50", "checkpoint": "#95a5a6",
}
"""What each kind of mark means on a curve, in the legend's order."""


def thin(points: list[tuple[int, float]], limit: int = MAX_POINTS) -> list[tuple[int, float]]:
    """At most about `limit` points, in step order, keeping each bucket's minimum and maximum.

    Like the committed metrics stream, thinning must not hide a one-step spike:
    a bucket's extremes are kept, its ordinary steps dropped.
    """
    if len(points) <= limit:
        return list(points)
    size = -(-len(points) // (limit // 2))
    out: list[tuple[int, float]] = []
    for i in range(0, len(points), size):
        chunk = points[i:i + size]
        lo = min(chunk, key=lambda p: p[1])
        hi = max(chunk, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    return out


def metric_spec(run: str, metric: str, points: list[tuple[int, float]], marks: list[dict[str, Any]]) -> dict[str, Any]:
    """A line of `metric` over steps, with a vertical rule per event mark (tooltip: what happened)."""
    steps = [s for s, _ in points]
    lo, hi = (min(steps), max(steps)) if steps else (0, 0)
    shown = [m for m in marks if lo <= m["step"] <= hi]
    layers: list[dict[str, Any]] = [{
        "data": {"values": [{"step": s, "value": v} for s, v in thin(points)]},
        "mark": {"type": "line", "strokeWidth": 1.2, "color": "#1f4e79"},
        "encoding": {
            "x": {"field": "step", "type": "quantitative", "title": "step"},
            "y": {"field": "value", "type": "quantitative", "title": metric, "scale": {"zero": False}},
            "tooltip": [{"field": "step", "type": "quantitative"},
                        {"field": "value", "type": "quantitative", "title": metric, "format": ".4g"}],
        },
    }]
    if shown:
        layers.append({
            "data": {"values": shown},
            "mark": {"type": "rule", "strokeWidth": 1.2, "strokeDash": [4, 3]},
            "encoding": {
                "x": {"field": "step", "type": "quantitative"},
                "color": {"field": "what", "type": "nominal", "title": "event",
                          "scale": {"domain": list(MARK_COLOURS), "range": list(MARK_COLOURS.values())}},
                "tooltip": [{"field": "what"}, {"field": "step", "type": "quantitative"}, {"field": "summary"}],
            },
        })
    return {"$schema": SCHEMA, "description": f"{metric} of run {run} by step, with its events marked",
            "width": "container", "height": 220, "autosize": {"type": "fit-x", "contains": "padding"},
            "layer": layers}


def reliability_spec(bins: list[dict[str, Any]]) -> dict[str, Any]:
    """Stated confidence against the share that held, per bin, with its 95% interval and the diagonal."""
    values = [{"stated": b["mean_forecast"], "held": b["observed"], "lo": b["ci"][0], "hi": b["ci"][1], "n": b["n"]}
              for b in bins]
    axis = {"type": "quantitative", "scale": {"domain": [0, 1]}}
    return {"$schema": SCHEMA, "description": "reliability diagram: stated confidence against the share that held",
            "width": "container", "height": 260, "autosize": {"type": "fit-x", "contains": "padding"},
            "layer": [
                {"data": {"values": [{"stated": 0, "held": 0}, {"stated": 1, "held": 1}]},
                 "mark": {"type": "line", "color": "#999999", "strokeDash": [4, 3]},
                 "encoding": {"x": {"field": "stated", **axis, "title": "stated confidence"},
                              "y": {"field": "held", **axis, "title": "share that held"}}},
                {"data": {"values": values}, "mark": {"type": "rule", "color": "#1f4e79"},
                 "encoding": {"x": {"field": "stated", **axis}, "y": {"field": "lo", **axis}, "y2": {"field": "hi"}}},
                {"data": {"values": values}, "mark": {"type": "point", "filled": True, "color": "#1f4e79"},
                 "encoding": {"x": {"field": "stated", **axis}, "y": {"field": "held", **axis},
                              "size": {"field": "n", "type": "quantitative", "title": "forecasts"},
                              "tooltip": [{"field": "stated", "format": ".0%"}, {"field": "held", "format": ".0%"},
                                          {"field": "n"}]}},
            ]}
