"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served with their assets from the service
itself, so they work on a machine without internet.

The scripts and styles come from the ``fastapi-offline`` package (MIT; Swagger UI is
Apache-2.0, ReDoc MIT), served under `DOCS_ASSETS`. Nothing is fetched from elsewhere at run
time: Swagger UI's validator badge (an image from validator.swagger.io) is turned off; ReDoc's
bundle shows a Redocly logo from its CDN in the sidebar, so the bundle is served with that URL
replaced by an empty image (the bundle hides a logo that does not load); and both pages carry a
Content-Security-Policy that lets the browser load nothing from any other origin.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["DOCS_ASSETS", "DOCS_CSP", "install_docs"]

DOCS_ASSETS = "/docs-assets"
ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
REDOC_JS = "redoc.standalone.js"
REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
# Inline script and styles: Swagger UI is started by an inline <script>, and both UIs set
# styles inline; ReDoc renders in a web worker made from a blob.
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)
# Merged into FastAPI's defaults; the token stays filled in across reloads of the page.
SWAGGER_PARAMETERS = {"validatorUrl": None, "persistAuthorization": True}


@cache
def _redoc_bundle() -> bytes:
    return (ASSETS_DIR / REDOC_JS).read_bytes().replace(REDOC_LOGO, b"data:,")


def install_docs(app: FastAPI) -> None:
    """Add /docs, /redoc and their assets to `app` (made with ``docs_url=None,
    redoc_url=None``, so that FastAPI's CDN pages are not there)."""
    openapi_url = app.openapi_url or "/openapi.json"
    favicon = f"{DOCS_ASSETS}/favicon.png"
    headers = {"Content-Security-Policy": DOCS_CSP}

    # Registered before the mount, so this route serves the bundle instead of the file.
    @app.get(f"{DOCS_ASSETS}/{REDOC_JS}", include_in_schema=False)
    def redoc_js() -> Response:
        return Response(
            _redoc_bundle(),
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    app.mount(DOCS_ASSETS, StaticFiles(directory=ASSETS_DIR), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=favicon,
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )
        page.headers.update(headers)
        return page

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        page = get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API",
            redoc_js_url=f"{DOCS_ASSETS}/{REDOC_JS}",
            redoc_favicon_url=favicon,
            with_google_fonts=False,
        )
        page.headers.update(headers)
        return page
