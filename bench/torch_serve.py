#!/usr/bin/env python3
"""The anchor of `bench/run serve`: the same two models (bench/torch_workloads.py's SR and GPT,
gpt-mini and sr-lite shapes) behind Python's http.server, one request at a time, as a user would
write it: POST /v1/upscale takes a PNG (Pillow decodes and encodes it) and POST /v1/generate
decodes greedily by recomputing the context for every token.
usage: torch_serve.py PORT THREADS  (prints 'listening' when ready)"""
import io, json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy
import torch
from PIL import Image

from torch_workloads import GPT, SR

LOCK = threading.Lock()  # one request at a time: the plain handler
SR_MODEL = SR("relu").eval()
GPT_MODEL = GPT().eval()


def decode_png(data):
    """[1, 3, H, W] in [0, 1], through Pillow."""
    image = numpy.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return torch.from_numpy(image.copy()).permute(2, 0, 1).unsqueeze(0).float() / 255


def encode_png(image):
    pixels = (image[0].clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with LOCK, torch.inference_mode():  # grad mode is per thread: the handler's own
            if self.path == "/v1/upscale":
                out, kind = encode_png(SR_MODEL(decode_png(body))), "image/png"
            else:
                request = json.loads(body)
                ids = [b for b in request["prompt"].encode()] or [10]
                text = []
                for _ in range(request.get("max_tokens", 64)):
                    logits = GPT_MODEL(torch.tensor([ids[-128:]]))
                    ids.append(int(logits[0, -1].argmax()))
                    text.append(ids[-1])
                out, kind = json.dumps({"text": bytes(text).decode("latin-1"), "tokens": len(text)}).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def main():
    torch.set_num_threads(int(sys.argv[2]))
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
