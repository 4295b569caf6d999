"""HTTP routes, one module per resource; each is a thin layer over a service."""
