"""Request and response models of the HTTP API (pydantic v2), a module per resource; the OpenAPI
document is built from them."""
