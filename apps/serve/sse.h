// Server-sent events (text/event-stream): a job's event log replayed from the start, then followed live
// until the job ends; a comment line every 15 s keeps proxies from closing an idle stream.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

#include "job_store.h"

namespace diffq::serve {

// "event: <name>\ndata: <json>\n\n"
std::string sse_frame(const JobEvent& ev);
void stream_job_events(JobStore& q, std::shared_ptr<Job> job, httplib::Response& res);

}  // namespace diffq::serve
