"""EVO-RAG Studio, the browser app: `services` (shared back end), `handlers` (plain functions), `views`
(rendering), `ui` (layout and wiring), `main` (launch). Nothing is imported here, so `import app` stays cheap."""

__all__: list[str] = []
