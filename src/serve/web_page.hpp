// ringattn serve — a page for people at GET / on rank 0's API port: a chat with the hosted
// model (streamed through POST /v1/chat/completions, read with fetch and a ReadableStream;
// max_tokens, temperature, and a session that keeps the conversation's rows on the ring) and
// the ring's live state, GET /v1/ring (ring_view.hpp), redrawn every second.
//
// Plain HTML, CSS and JavaScript in one string (web_page.cpp): no build step, no framework,
// no external URL (its Content-Security-Policy allows this origin only). The page holds no
// data, so it is the one thing served without the key: everything it shows it fetches with
// the key the user types, which stays in that browser's localStorage. GET /v1/ring needs the
// key like every other route.
#pragma once

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace ringattn::serve {

class Metrics;
class RingService;

// GET / (the page) and GET /v1/ring, on the endpoint's server.
void add_page_routes(httplib::Server& s, const RingService& service, const Metrics& metrics);
// True for the page itself (GET or HEAD /): the endpoint serves it without the key.
bool is_public_page(const httplib::Request& req);

}  // namespace ringattn::serve
