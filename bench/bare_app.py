"""The ceiling for server benchmarks: a bare Falcon app answering fixed bodies, run under the
same gunicorn settings as `colibri serve`."""
import falcon

REFUSAL = (b'{"error":{"message":"\'temperature\' has an invalid value.","type":"invalid_request_error",'
           b'"param":"temperature","code":"invalid_value"}}')
COMPLETION = (b'{"id":"cmpl-x","object":"text_completion","created":0,"model":"colibri-tiny","choices":[{"index":0,'
              b'"text":"x","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,'
              b'"total_tokens":2}}')


def _sse_chunks(n: int):
    """What a 64-token chat stream sends, with fixed content: role chunk, n token chunks, a
    finish chunk, a usage chunk, [DONE]."""
    head = b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":0,"model":"colibri-tiny","choices":['
    yield head + b'{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
    for _ in range(n):
        yield head + b'{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    yield head + b'{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    yield head + b'],"usage":{"prompt_tokens":1,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (n, n + 1)
    yield b"data: [DONE]\n\n"


class Chat:
    """Refuses like a validation error, or streams 64 fixed chunks when asked to stream."""

    def on_post(self, req, resp):
        if b'"stream": true' in req.bounded_stream.read():
            resp.content_type = "text/event-stream"
            resp.stream = _sse_chunks(64)
            return
        resp.status = falcon.HTTP_400
        resp.data = REFUSAL


class Completions:
    def on_post(self, req, resp):
        req.bounded_stream.read()
        resp.data = COMPLETION


app = falcon.App()
app.add_route("/v1/chat/completions", Chat())
app.add_route("/v1/completions", Completions())
