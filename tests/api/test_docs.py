"""/docs and /redoc work offline, and the OpenAPI document declares how each route is opened."""

from __future__ import annotations

import re

import pytest

from tests.api.conftest import Api

ASSET = re.compile(r"""(?:src|href)=["']([^"']+)["']""")
URL_IN_SCRIPT = re.compile(r"""\burl:\s*['"]([^'"]+)['"]""")


@pytest.mark.parametrize(
    ("page", "script"),
    [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")],
)
def test_docs_page_loads_every_asset_from_the_service_itself(
    api: Api, page: str, script: str
) -> None:
    response = api.client.get(page)
    assert response.status_code == 200
    html = response.text
    assets = ASSET.findall(html)
    assert any(a.endswith(script) for a in assets), assets
    for asset in assets:
        # Same origin: a path, never a host (a CDN), so the page renders without internet.
        assert asset.startswith("/") and not asset.startswith("//"), asset
        fetched = api.client.get(asset)
        assert fetched.status_code == 200, asset
        assert len(fetched.content) > 1000, asset
    assert "http://" not in html and "https://" not in html
    # The browser may load nothing from another origin, whatever the scripts ask for.
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "https:" not in csp and "*" not in csp


def test_redoc_is_served_without_its_cdn_logo(api: Api) -> None:
    bundle = api.client.get("/docs-assets/redoc.standalone.js")
    assert bundle.status_code == 200 and "Redoc" in bundle.text
    assert "cdn.redoc.ly" not in bundle.text


def test_swagger_ui_loads_the_spec_it_is_served_with_and_no_validator(api: Api) -> None:
    html = api.client.get("/docs").text
    assert URL_IN_SCRIPT.findall(html) == ["/openapi.json"]
    # Swagger UI's default validator badge is an image from validator.swagger.io.
    assert '"validatorUrl": null' in html


def test_every_route_declares_the_token_it_takes(api: Api) -> None:
    spec = api.client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["tenantToken"] == schemes["tenantToken"] | {"type": "http", "scheme": "bearer"}
    assert schemes["joinToken"] == schemes["joinToken"] | {"type": "http", "scheme": "bearer"}
    public = {("get", "/healthz"), ("get", "/leader"), ("get", "/metrics")}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            names = {name for req in operation.get("security", []) for name in req}
            if (method, path) in public:
                assert names == set(), (method, path)
            elif "/workers" in path:
                assert names == {"joinToken"}, (method, path)
            else:
                assert names == {"tenantToken"}, (method, path)


def test_every_route_that_reads_the_store_declares_its_503(api: Api) -> None:
    """Each checks a token in the store; /healthz and /metrics do not answer 503, /leader
    answers it as a standby (with its own body)."""
    spec = api.client.get("/openapi.json").json()
    body = spec["components"]["schemas"]["Unavailable"]
    assert body["required"] == ["detail"]
    assert body["properties"]["store"]["anyOf"][0]["enum"] == ["full", "unreachable"]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            declared = operation["responses"].get("503")
            if path in ("/healthz", "/metrics", "/leader"):
                assert declared is None or "Unavailable" not in str(declared), (method, path)
                continue
            assert declared is not None, (method, path)
            schema = declared["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/Unavailable"}, (method, path)
            assert declared["headers"]["Retry-After"]["required"] is True, (method, path)


def test_the_declared_scheme_is_the_one_the_routes_check(api: Api) -> None:
    assert api.client.get("/jobs").status_code == 401
    assert api.client.get("/jobs", headers={"Authorization": "Basic abc"}).status_code == 401
    missing = api.client.get("/jobs", headers={"Authorization": "Bearer"})
    assert missing.status_code == 401 and "Bearer" in missing.json()["detail"]
    assert api.client.get("/jobs", headers=api.auth()).status_code == 200
    job = api.submit()
    join = {"Authorization": f"Bearer {job['join_token']}"}
    tenant_on_worker_route = api.client.post(
        f"/jobs/{job['id']}/workers", json={}, headers=api.auth()
    )
    assert tenant_on_worker_route.status_code == 401
    assert api.client.get("/jobs", headers=join).status_code == 401
