"""The MkDocs site of a catalog, and what spares MkDocs work on unchanged pages or an unchanged site."""
