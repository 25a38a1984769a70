-- index for a thread's latest user turns (the picker's history window stays flat as threads grow)
CREATE INDEX transcript_thread_recent ON transcript (thread_id, role, id DESC);
