"""A minimal local stand-in for the Hugging Face Hub HTTP API, enough for `HfApi.create_repo` and
`HfApi.upload_folder` of small files (the regular, non-LFS upload mode), and for `snapshot_download` of a repo
added with `add_repo` (repo info with its file list, HEAD and GET of each file). The machines that run the tests have
no network, and monkeypatching HfApi would skip the very code path that uploads; this server lets
huggingface_hub run its real requests and records what arrived."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self):
        self.commits: list[dict] = []  # each commit's header: summary (message), description
        self.repos: dict[str, dict[str, bytes]] = {}  # repo id -> path -> content
        self.requests: list[tuple[str, str]] = []
        self.validated_yaml: str | None = None
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _reply(self, status: int, payload: dict):
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hub.requests.append(("POST", self.path))
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:2] == ["api", "validate-yaml"]:  # the model card's metadata is checked before upload
                    hub.validated_yaml = json.loads(body).get("content")
                    return self._reply(200, {"errors": [], "warnings": []})
                if parts[:3] == ["api", "repos", "create"]:
                    request = json.loads(body)
                    repo_id = f"{request['organization']}/{request['name']}" if request.get("organization") else request["name"]
                    hub.repos.setdefault(repo_id, {})
                    return self._reply(200, {"url": f"{hub.endpoint}/{repo_id}"})
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "preupload":
                    files = json.loads(body)["files"]
                    return self._reply(200, {"files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]})
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "commit":
                    repo_id = f"{parts[2]}/{parts[3]}"
                    for line in body.decode().splitlines():
                        item = json.loads(line)
                        if item.get("key") == "header":  # the commit's message and description
                            hub.commits.append(item["value"])
                        if item.get("key") == "file":
                            value = item["value"]
                            hub.repos.setdefault(repo_id, {})[value["path"]] = base64.b64decode(value["content"])
                    return self._reply(200, {"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{'0' * 40}",
                                             "commitOid": "0" * 40, "pullRequestUrl": None})
                return self._reply(404, {"error": f"fake hub: no route for POST {self.path}"})

            def _file(self, send_body: bool):
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) >= 5 and parts[2] == "resolve":  # /{org}/{name}/resolve/{revision}/{path}
                    content = hub.repos.get(f"{parts[0]}/{parts[1]}", {}).get("/".join(parts[4:]))
                    if content is not None:
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(content)))
                        self.send_header("ETag", f'"{hashlib.sha256(content).hexdigest()}"')
                        self.send_header("X-Repo-Commit", COMMIT)
                        self.end_headers()
                        if send_body:
                            self.wfile.write(content)
                        return True
                return False

            def do_HEAD(self):
                hub.requests.append(("HEAD", self.path))
                if not self._file(send_body=False):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def do_GET(self):
                hub.requests.append(("GET", self.path))
                if self._file(send_body=True):
                    return None
                parts = self.path.split("?")[0].strip("/").split("/")
                repo_id = f"{parts[2]}/{parts[3]}" if parts[:2] == ["api", "models"] and len(parts) >= 4 else None
                if repo_id in hub.repos and len(parts) >= 5 and parts[4] == "tree":  # the file list, one page
                    body = json.dumps([{"type": "file", "path": name, "size": len(data),
                                        "oid": hashlib.sha1(data).hexdigest()}
                                       for name, data in sorted(hub.repos[repo_id].items())]).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return None
                if repo_id is not None:  # repo info, at a revision or not
                    if repo_id in hub.repos:
                        return self._reply(200, {"id": repo_id, "modelId": repo_id, "sha": COMMIT, "private": False,
                                                 "siblings": [{"rfilename": name} for name in sorted(hub.repos[repo_id])]})
                return self._reply(404, {"error": f"fake hub: no route for GET {self.path}"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add_repo(self, repo_id: str, directory) -> None:
        """Serve every file of `directory` as the repository `repo_id`."""
        from pathlib import Path

        root = Path(directory)
        self.repos[repo_id] = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
