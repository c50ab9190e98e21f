#include "sse.h"

namespace diffq::serve {

std::string sse_frame(const JobEvent& ev) { return "event: " + ev.name + "\ndata: " + ev.data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n"; }

void stream_job_events(JobStore& q, std::shared_ptr<Job> job, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto next = std::make_shared<size_t>(0);
  res.set_chunked_content_provider("text/event-stream", [&q, job, next](size_t, httplib::DataSink& sink) {
    bool final = false;
    std::vector<JobEvent> evs;
    try {
      evs = q.events_since(job, *next, std::chrono::milliseconds(15000), final);
    } catch (const std::exception& e) {  // the store went away (Redis down): say why, end the stream
      std::string note = ": " + std::string(e.what());
      for (char& c : note) c = c == '\n' || c == '\r' ? ' ' : c;
      note += "\n\n";
      sink.write(note.data(), note.size());
      return false;
    }
    if (evs.empty() && !final) {
      const std::string ping = ": keep-alive\n\n";
      return sink.write(ping.data(), ping.size());
    }
    for (const auto& ev : evs) {
      const std::string f = sse_frame(ev);
      if (!sink.write(f.data(), f.size())) return false;  // the client went away
      ++*next;
    }
    if (final) {
      // Events pushed after the final one cannot exist (finish() is the last push), so the log is complete.
      sink.done();
    }
    return true;
  });
}

}  // namespace diffq::serve
