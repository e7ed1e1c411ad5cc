"""A live Schema Registry, read-only over HTTP (``GET`` only), every answer cached.

``GET /schemas/ids/{id}`` (``schema``, ``schemaType``, ``references``),
``GET /schemas/guids/{guid}`` (registries that have GUIDs) and, for references,
``GET /subjects/{subject}/versions/{version}``. A 404 is an unknown schema (cached as
such); anything else that fails is a :class:`RegistryError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from .registry import Reference, Registry, RegistryError, Schema, schema_from_json

@dataclass(slots=True)
class LiveRegistry(Registry):
    url: str = ""
    timeout: float = 10.0
    auth: tuple[str, str] | None = None  # HTTP basic auth (user, password)
    _client: object = None
    _misses: set = field(default_factory=set)

    _UNPICKLED = ("decoders", "_client")  # an HTTP client does not travel; a new one is made

    def __init__(self, url: str, timeout: float = 10.0, auth: tuple[str, str] | None = None) -> None:
        Registry.__init__(self)
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.auth = auth
        self._client = None
        self._misses = set()

    def _get(self, path: str) -> dict | None:
        import httpx

        if self._client is None:
            self._client = httpx.Client(base_url=self.url, timeout=self.timeout, auth=self.auth)
        try:
            response = self._client.get(path, headers={"Accept": "application/vnd.schemaregistry.v1+json"})
        except httpx.HTTPError as err:
            raise RegistryError(f"{self.url}{path}: {err}") from err
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(f"{self.url}{path}: HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError as err:
            raise RegistryError(f"{self.url}{path}: not JSON") from err

    def by_id(self, schema_id: int) -> Schema | None:
        if schema_id not in self.schemas and ("id", schema_id) not in self._misses:
            doc = self._get(f"/schemas/ids/{schema_id}")
            if doc is None:
                self._misses.add(("id", schema_id))
            else:
                self.add(schema_from_json(doc, schema_id))
        return self.schemas.get(schema_id)

    def by_guid(self, guid: str) -> Schema | None:
        if guid not in self.guids and ("guid", guid) not in self._misses:
            doc = self._get(f"/schemas/guids/{quote(guid)}")
            if doc is None or "id" not in doc:
                self._misses.add(("guid", guid))
            else:
                self.add(schema_from_json({"guid": guid, **doc}))
        return super(LiveRegistry, self).by_guid(guid)

    def resolve(self, ref: Reference) -> Schema:
        if (ref.subject, ref.version) not in self.versions:
            doc = self._get(f"/subjects/{quote(ref.subject, safe='')}/versions/{ref.version}")
            if doc is not None:
                self.add(schema_from_json(doc), ref.subject, ref.version)
        return super(LiveRegistry, self).resolve(ref)
