"""Where in the bucket an object starts work when it lands: an upload of a pending file import, or a
drop that makes its own import. app.py's S3 rule names them at import, before any service is loaded."""
from __future__ import annotations

UPLOADS_PREFIX = "uploads/"
DROPS_PREFIX = "drops/"
