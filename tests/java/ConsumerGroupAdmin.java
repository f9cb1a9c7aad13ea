// The Java AdminClient's view of a KIP-848 consumer group: listGroups with the
// consumer type filter (ListGroups v5), describeConsumerGroups (ConsumerGroupDescribe)
// and listConsumerGroupOffsets. Prints "listed GROUP TYPE STATE", "describe ..." and
// one "member ID epoch=E partitions=p,p" line per member, then "OK consumer-group".
// Usage: ConsumerGroupAdmin BOOTSTRAP GROUP TOPIC PARTITIONS
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;

public final class ConsumerGroupAdmin {
    public static void main(String[] args) throws Exception {
        String group = args[1];
        String topic = args[2];
        int partitions = Integer.parseInt(args[3]);
        try (Admin admin = Admin.create(Check.props(args[0]))) {
            GroupListing mine = null;
            for (GroupListing l : admin.listGroups(ListGroupsOptions.forConsumerGroups()
                    .withTypes(Set.of(GroupType.CONSUMER))).all().get()) {
                if (l.groupId().equals(group)) {
                    mine = l;
                }
            }
            Check.that(mine != null, group + " not listed as a consumer-type group");
            Check.out("listed " + mine.groupId() + " " + mine.type().get() + " " + mine.groupState().get());
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                    .describedGroups().get(group).get();
            Check.out("describe " + d.groupId() + " type=" + d.type() + " state=" + d.groupState()
                    + " members=" + d.members().size() + " assignor=" + d.partitionAssignor()
                    + " epoch=" + d.groupEpoch().orElse(-1));
            TreeSet<Integer> owned = new TreeSet<>();
            int count = 0;
            for (MemberDescription m : d.members()) {
                TreeSet<Integer> ps = new TreeSet<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) {
                    Check.that(tp.topic().equals(topic), "topic " + tp);
                    ps.add(tp.partition());
                }
                owned.addAll(ps);
                count += ps.size();
                Check.out("member " + m.consumerId() + " epoch=" + m.memberEpoch().orElse(-1)
                        + " partitions=" + ps);
            }
            Check.that(count == owned.size(), "a partition is owned twice");
            Map<TopicPartition, OffsetAndMetadata> offsets =
                    admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            Check.out("committed partitions " + offsets.size() + " of " + partitions);
        }
        Check.out("OK consumer-group");
    }
}
