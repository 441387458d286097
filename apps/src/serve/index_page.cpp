// The page troupe-serve shows at GET /: upload an image to upscale, type a prompt to continue.
#include "troupe/apps/serve/service.hpp"

namespace troupe::apps::serve {

const std::string& index_page() {
  static const std::string page = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>troupe-serve</title>
<style>
  body { font-family: sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; }
  section { border: 1px solid #ccc; border-radius: 6px; padding: 1rem; margin-bottom: 1.5rem; }
  textarea { width: 100%; }
  pre { white-space: pre-wrap; background: #f4f4f4; padding: 0.5rem; }
  .error { color: #b00; }
</style>
</head>
<body>
<h1>troupe-serve</h1>
<p><label>Token (if the server needs one) <input id="token" type="password"></label></p>
<section>
  <h2>Upscale an image (x2)</h2>
  <form id="upscale-form">
    <input id="image" type="file" accept="image/png" required>
    <button type="submit">Upscale</button>
  </form>
  <p id="upscale-status"></p>
  <img id="upscaled" alt="">
</section>
<section>
  <h2>Continue a prompt</h2>
  <form id="generate-form">
    <textarea id="prompt" rows="3">The actor model </textarea>
    <label>Tokens <input id="max-tokens" type="number" value="64" min="1"></label>
    <label>Temperature <input id="temperature" type="number" value="0" min="0" step="0.1"></label>
    <button type="submit">Generate</button>
  </form>
  <pre id="generated"></pre>
</section>
<script>
function headers(extra) {
  const h = Object.assign({}, extra);
  const token = document.getElementById('token').value;
  if (token) h['Authorization'] = 'Bearer ' + token;
  return h;
}
async function failure(response) {
  try { return (await response.json()).error; } catch (e) { return response.status + ' ' + response.statusText; }
}
document.getElementById('upscale-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const status = document.getElementById('upscale-status');
  const file = document.getElementById('image').files[0];
  status.textContent = 'upscaling...';
  status.className = '';
  const response = await fetch('/v1/upscale', {method: 'POST', headers: headers({'Content-Type': 'image/png'}), body: file});
  if (!response.ok) { status.textContent = await failure(response); status.className = 'error'; return; }
  const image = document.getElementById('upscaled');
  image.src = URL.createObjectURL(await response.blob());
  await image.decode();
  status.textContent = 'upscaled to ' + image.naturalWidth + 'x' + image.naturalHeight;
});
document.getElementById('generate-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const out = document.getElementById('generated');
  out.textContent = 'generating...';
  out.className = '';
  const body = {prompt: document.getElementById('prompt').value,
                max_tokens: Number(document.getElementById('max-tokens').value),
                temperature: Number(document.getElementById('temperature').value)};
  const response = await fetch('/v1/generate', {method: 'POST', headers: headers({'Content-Type': 'application/json'}),
                                                body: JSON.stringify(body)});
  if (!response.ok) { out.textContent = await failure(response); out.className = 'error'; return; }
  const answer = await response.json();
  out.textContent = body.prompt + answer.text;
  out.dataset.tokens = answer.tokens;
});
// With #selftest in the address the page fills and submits both forms itself (a drawn 20x12 image,
// a fixed prompt) and marks itself done: what the headless-browser test loads.
if (location.hash === '#selftest') {
  const canvas = document.createElement('canvas');
  canvas.width = 20;
  canvas.height = 12;
  const context = canvas.getContext('2d');
  context.fillStyle = '#3060c0';
  context.fillRect(0, 0, 20, 12);
  context.fillStyle = '#f0d020';
  context.fillRect(5, 3, 8, 5);
  canvas.toBlob((blob) => {
    const files = new DataTransfer();
    files.items.add(new File([blob], 'selftest.png', {type: 'image/png'}));
    document.getElementById('image').files = files.files;
    document.getElementById('upscale-form').requestSubmit();
    document.getElementById('prompt').value = 'The actor ';
    document.getElementById('max-tokens').value = '24';
    document.getElementById('generate-form').requestSubmit();
  }, 'image/png');
  const check = setInterval(() => {
    const upscaled = document.getElementById('upscale-status').textContent.startsWith('upscaled to');
    const generated = document.getElementById('generated').dataset.tokens !== undefined;
    if (upscaled && generated) {
      clearInterval(check);
      document.title = 'troupe-serve: selftest done';
    }
  }, 50);
}
</script>
</body>
</html>
)html";
  return page;
}

}  // namespace troupe::apps::serve
