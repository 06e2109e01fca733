"""Views as JSON: the view's raw data, bytes as integers."""

from __future__ import annotations

import json

from bcgprof.render.model import View


def render_json(view: View) -> str:
    return json.dumps(view.data, indent=2) + "\n"
