-- reserved for background runs and triggers
SELECT 1;
