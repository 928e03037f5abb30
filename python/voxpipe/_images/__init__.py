"""Images: what the user holds. ``load``/``save`` (dispatched through the format registry) and
``accelerate_nibabel``; nibabel's own classes throughout. Imports the registry, never a format."""
