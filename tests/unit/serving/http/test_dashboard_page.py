"""The dashboard's page and files are served without a token (they hold no data)."""

from __future__ import annotations

from pathlib import Path

import httpx
from nodeapp import make_app

from streamiq.config import Settings


async def test_page_and_files_are_open_and_come_from_the_package(tmp_path: Path) -> None:
    app = make_app(tmp_path / "n", Settings(auth=True, jwt_secret="s" * 32,
                                            cluster_secret="c"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://n") as c:
        page = await c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="/dashboard/app.js">' in page.text
        assert '<label for="token">' in page.text  # every input has a label
        for name, kind in (("app.js", "javascript"), ("style.css", "text/css")):
            r = await c.get(f"/dashboard/{name}")
            assert r.status_code == 200 and kind in r.headers["content-type"], name
        script = (await c.get("/dashboard/app.js")).text
        assert "https://" not in page.text + script  # no CDN
        # live queries read the views' change streams (polling only as a fallback)
        assert '<label for="q-live">' in page.text
        assert "/changes?" in script and "/aggregate/changes?" in script
        assert "last-event-id" in script
