"""The Chalice app: the HTTP API under /v1 and, as they arrive, the event handlers of async work."""
from chalice import Chalice

from chalicelib.api import API_PREFIX, PUBLIC_PATHS, ROUTERS
from chalicelib.api.middleware import make_http_middleware

app = Chalice(app_name="recon")
app.register_middleware(make_http_middleware(PUBLIC_PATHS), "http")

for router in ROUTERS:
    app.register_blueprint(router.blueprint, url_prefix=API_PREFIX)
