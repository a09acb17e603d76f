"""The live episode (`episode.LiveEpisode`): one episode stepped as a person watches and steers it - the policy's
proposal, a step taken in the policy's place (`human`), a verdict override, sibling candidates scored by their branch
returns - with every change mirrored to the store. The studio keeps one per browser session."""
