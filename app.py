"""The Chalice app: the HTTP API under /v1 and the event handlers of async work."""
from chalice import Chalice

from chalicelib.api import API_PREFIX, PUBLIC_PATHS, ROUTERS
from chalicelib.api.middleware import make_http_middleware
from chalicelib.jobs.bulk import handle_bulk_messages
from chalicelib.settings import current_settings

app = Chalice(app_name="recon")
app.register_middleware(make_http_middleware(PUBLIC_PATHS), "http")

for router in ROUTERS:
    app.register_blueprint(router.blueprint, url_prefix=API_PREFIX)


@app.on_sqs_message(queue=current_settings().bulk_queue_name, batch_size=1)
def bulk_worker(event):
    handle_bulk_messages(event)
