"""The ceiling for server benchmarks: a bare Falcon app answering fixed bodies, run under the
same gunicorn settings as `colibri serve`."""
import falcon

REFUSAL = (b'{"error":{"message":"\'temperature\' has an invalid value.","type":"invalid_request_error",'
           b'"param":"temperature","code":"invalid_value"}}')
COMPLETION = (b'{"id":"cmpl-x","object":"text_completion","created":0,"model":"colibri-tiny","choices":[{"index":0,'
              b'"text":"x","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1,'
              b'"total_tokens":2}}')


class Chat:
    def on_post(self, req, resp):
        req.bounded_stream.read()
        resp.status = falcon.HTTP_400
        resp.data = REFUSAL


class Completions:
    def on_post(self, req, resp):
        req.bounded_stream.read()
        resp.data = COMPLETION


app = falcon.App()
app.add_route("/v1/chat/completions", Chat())
app.add_route("/v1/completions", Completions())
