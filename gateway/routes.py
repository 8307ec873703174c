"""The URL table, in one place (the OpenAPI document is checked against it by a test)."""

from __future__ import annotations

from aiohttp import web

from gateway import views

# Any characters, line breaks included, so a malformed name reaches the view and is 400 with the
# reason, not 404 "no route".
ANY = r"[\s\S]+"
KEY = f"{{key:{ANY}}}"


def setup_routes(app: web.Application) -> None:
    app.router.add_put(f"/v1/objects/{KEY}", views.put_object, name="put_object")
    # HEAD is GET without the body (RFC 9110): with a Fencing-Token it is a fenced read too.
    app.router.add_get(f"/v1/objects/{KEY}", views.get_object, name="get_object")
    app.router.add_delete(f"/v1/objects/{KEY}", views.delete_object, name="delete_object")
    app.router.add_get("/v1/objects", views.list_objects, name="list_objects", allow_head=False)
    app.router.add_get(f"/v1/fences/{{resource:{ANY}}}", views.get_fence, name="get_fence", allow_head=False)
    app.router.add_get("/healthz", views.healthz, name="healthz", allow_head=False)
    app.router.add_get("/readyz", views.readyz, name="readyz", allow_head=False)
    app.router.add_get("/metrics", views.metrics, name="metrics", allow_head=False)
    app.router.add_get("/v1/openapi.json", views.openapi, name="openapi", allow_head=False)
